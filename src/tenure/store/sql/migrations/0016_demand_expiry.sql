-- Demand that ends by itself (ADR 0046): a demand record may carry `expires_at` (store clock; NULL: until it
-- is removed). A session's record lives as long as the session; a request's (a mutating request on an AUTO
-- project) and an explicit one with an expiry end when it passes, and the sweep then re-derives


ALTER TABLE project_demand ADD COLUMN expires_at DOUBLE PRECISION;
