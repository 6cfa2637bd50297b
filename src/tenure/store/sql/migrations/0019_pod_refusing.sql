-- Why a pod claims nothing new (ADR 0051): NULL while it takes projects, else a short reason ("disk-full: …")
-- written by each of its beats. The master places nothing on a refusing pod and a drain wakes no refusing
-- pod; the pods table shows the reason. The pod's readiness is false meanwhile.

ALTER TABLE pods ADD COLUMN refusing TEXT;
