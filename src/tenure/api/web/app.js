// The tenure dashboard: polls the pod's JSON API every second with the token the user typed
// (kept in sessionStorage, sent as "Authorization: Bearer …") and redraws the tables.
// Every value from the API reaches the DOM as text (textContent / text nodes), never as markup.
"use strict";

(function () {
  const API = "/api/v1";
  const POLL_MS = 1000;
  const TOKEN_KEY = "tenure.dashboard.token";
  const HISTORY_LIMIT = 50;

  // ------------------------------------------------------------------ the API

  class ApiError extends Error {
    constructor(status, problem) {
      const title = problem && typeof problem.title === "string" ? problem.title : "";
      super(title ? status + ": " + title : "HTTP " + status);
      this.status = status;
      this.code = problem && typeof problem.code === "string" ? problem.code : "";
    }
  }

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (e) {
      return "";
    }
  }

  // GET an API path: the decoded body, or null when the path answers 404 (and `optional` is set).
  async function get(path, optional) {
    const headers = { Accept: "application/json" };
    const secret = token();
    if (secret) headers.Authorization = "Bearer " + secret;
    const response = await fetch(API + path, { headers: headers, cache: "no-store", credentials: "omit" });
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      body = null;
    }
    if (response.ok) return body;
    if (response.status === 404 && optional) return null;
    throw new ApiError(response.status, body);
  }

  const enc = encodeURIComponent;

  function projectPath(tenant, name) {
    return "/projects/" + enc(tenant) + "/" + enc(name);
  }

  // ------------------------------------------------------------------ DOM helpers (text only)

  function el(tag, props, children) {
    const node = document.createElement(tag);
    if (props) {
      for (const key of Object.keys(props)) {
        const value = props[key];
        if (value === undefined || value === null) continue;
        if (key === "text") node.textContent = String(value);
        else if (key === "className") node.className = value;
        else node.setAttribute(key, String(value));
      }
    }
    for (const child of children || []) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function cell(content, props) {
    if (content instanceof Node) return el("td", props, [content]);
    if (Array.isArray(content)) return el("td", props, content);
    return el("td", Object.assign({ text: content === null || content === undefined ? "—" : content }, props || {}));
  }

  function fill(tbody, rows, columns, emptyText) {
    const fresh = rows.length ? rows : [el("tr", null, [el("td", { className: "empty", colspan: columns, text: emptyText })])];
    tbody.replaceChildren(...fresh);
  }

  function byId(id) {
    return document.getElementById(id);
  }

  function setText(id, text, className) {
    const node = byId(id);
    node.textContent = text;
    if (className !== undefined) node.className = className;
  }

  // ------------------------------------------------------------------ formatting

  function millis(at) {
    if (at === null || at === undefined || at === "") return NaN;
    if (typeof at === "number") return at * 1000;
    const n = Number(at);
    return Number.isFinite(n) ? n * 1000 : Date.parse(String(at));
  }

  function when(at) {
    const ms = millis(at);
    if (!Number.isFinite(ms)) return at === null || at === undefined ? "—" : String(at);
    return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z";
  }

  function ago(at) {
    const ms = millis(at);
    if (!Number.isFinite(ms)) return "—";
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 10) return s.toFixed(1) + " s ago";
    if (s < 120) return Math.round(s) + " s ago";
    if (s < 7200) return Math.round(s / 60) + " min ago";
    if (s < 172800) return Math.round(s / 3600) + " h ago";
    return Math.round(s / 86400) + " d ago";
  }

  function pairs(map) {
    if (!map || typeof map !== "object") return [];
    return Object.keys(map)
      .sort()
      .map(function (k) {
        return k + "=" + String(map[k]);
      });
  }

  function labelList(map, none) {
    const items = pairs(map);
    if (!items.length) return el("span", { className: "muted", text: none });
    return el(
      "span",
      null,
      items.map(function (text) {
        return el("code", { className: "label", text: text });
      })
    );
  }

  function number(value, digits) {
    const n = Number(value);
    if (!Number.isFinite(n)) return "—";
    return digits === undefined ? String(n) : n.toFixed(digits).replace(/\.?0+$/, "");
  }

  function statusClass(status) {
    if (status === "RUNNING") return "ok";
    if (status === "ERROR" || status === "FAILED") return "bad";
    if (status === "DRAINING" || status === "RECOVERING" || status === "STARTING") return "warn";
    return "";
  }

  function podName(pods, podId) {
    const pod = pods && pods.get(podId);
    return pod ? pod.node_name : "";
  }

  function ownerNode(owner, pods) {
    if (!owner || !owner.pod_id) return el("span", { className: "muted", text: "none" });
    const host = podName(pods, owner.pod_id);
    return el("span", null, [
      el("code", { className: "pod-id", text: owner.pod_id }),
      host ? " " + host + " " : " ",
      el("span", { className: owner.live ? "ok badge" : "bad badge", text: owner.live ? "live" : "expired" }),
    ]);
  }

  function projectLink(tenant, name) {
    return el("a", { href: "/ui" + projectPath(tenant, name), text: tenant + "/" + name });
  }

  // ------------------------------------------------------------------ the overview page

  async function pods() {
    const body = await get("/pods");
    return Array.isArray(body && body.pods) ? body.pods : [];
  }

  async function master() {
    return get("/cluster/master", true);
  }

  function drawPods(list, boss) {
    const masterId = boss && boss.pod_id;
    const rows = list.map(function (pod) {
      const capacity = Number(pod.capacity) || 0;
      const score = Number(pod.score) || 0;
      const load = el("span", null, [
        el("progress", { max: capacity > 0 ? capacity : 1, value: Math.min(score, capacity > 0 ? capacity : 1) }),
        number(score, 2) + " / " + number(capacity, 2),
      ]);
      const role = [];
      if (masterId && pod.id === masterId) role.push(el("span", { className: "badge ok role-master", text: "master" }));
      if (pod.this) role.push(el("span", { className: "badge", text: "this pod" }));
      return el("tr", { "data-pod": pod.id, className: pod.live ? "" : "muted" }, [
        cell(el("code", { text: pod.id })),
        cell(pod.node_name),
        cell(pod.live ? "live" : "silent", { className: pod.live ? "ok live" : "bad live" }),
        cell(pod.status, { className: "status " + statusClass(pod.status) }),
        cell(labelList(pod.labels, "none")),
        cell(load, { className: "load" }),
        cell(number(pod.running), { className: "running" }),
        cell(ago(pod.heartbeat_at), { title: when(pod.heartbeat_at) }),
        cell(role, { className: "role" }),
      ]);
    });
    fill(byId("pods").tBodies[0], rows, 9, "no pods");
    if (boss === null) {
      setText("master", "Cluster master: not available on this pod.", "muted");
    } else if (!boss || !boss.pod_id) {
      setText("master", "Cluster master: none elected.", "muted");
    } else {
      const host = list.find(function (p) {
        return p.id === boss.pod_id;
      });
      setText(
        "master",
        "Cluster master: " +
          boss.pod_id +
          (host ? " (" + host.node_name + ")" : "") +
          ", epoch " +
          String(boss.epoch) +
          (boss.live ? ", live" : ", lease expired"),
        boss.live ? "" : "warn"
      );
    }
  }

  function drawDemand(demand, projects) {
    let pending;
    let summary;
    if (demand === null) {
      // the cluster demand endpoint is not on this pod: the projects' own pending_since stands in
      pending = projects
        .filter(function (p) {
          return p.pending_since !== null && p.pending_since !== undefined;
        })
        .map(function (p) {
          return { tenant: p.tenant, name: p.name, score: p.placement_score, selector: p.placement_selector, pending_since: p.pending_since };
        });
      summary = "Cluster demand: not available on this pod; " + pending.length + " visible project(s) pending placement.";
    } else {
      pending = Array.isArray(demand.pending) ? demand.pending : [];
      summary =
        String(demand.count === undefined ? pending.length : demand.count) +
        " project(s) pending placement, total score " +
        number(demand.score === undefined ? 0 : demand.score, 2) +
        ".";
    }
    const rows = pending.map(function (d) {
      let tenant = d.tenant;
      let name = d.name;
      if ((tenant === undefined || name === undefined) && typeof d.project === "string") {
        const cut = d.project.indexOf("/");
        tenant = d.project.slice(0, cut);
        name = d.project.slice(cut + 1);
      }
      const ref = String(tenant) + "/" + String(name);
      return el("tr", { "data-project": ref }, [
        cell(projectLink(String(tenant), String(name))),
        cell(number(d.score, 2)),
        cell(labelList(d.selector, "any pod")),
        cell(ago(d.pending_since), { title: when(d.pending_since) }),
      ]);
    });
    setText("demand-summary", summary, "muted");
    fill(byId("demand").tBodies[0], rows, 4, "nothing pending");
  }

  // How saved a project is, as the pod that answers knows it: only its owner knows the times (null elsewhere)
  function savedCell(p) {
    const lost = Array.isArray(p.preserved) ? p.preserved.length : 0;
    const parts = [];
    if (lost) parts.push(el("span", { className: "badge bad lost", title: "preserved deltas: writes the former owner never checkpointed", text: lost + " lost" }));
    if (p.unsaved_since !== null && p.unsaved_since !== undefined) {
      parts.push(el("span", { className: "warn unsaved", title: "changed since " + when(p.unsaved_since), text: "unsaved " + ago(p.unsaved_since) }));
    } else if (p.last_checkpoint_at !== null && p.last_checkpoint_at !== undefined) {
      parts.push(el("span", { className: "ok saved", title: when(p.last_checkpoint_at), text: "saved " + ago(p.last_checkpoint_at) }));
    } else if (!lost) {
      parts.push(el("span", { className: "muted", title: "only the pod that runs it knows", text: "—" }));
    }
    return cell(parts, { className: "saving" });
  }

  function drawProjects(projects, podMap) {
    const rows = projects.map(function (p) {
      // GET /projects carries each project's owner: one request a refresh, whatever the number of projects
      const owner = p.owner || null;
      const ref = p.tenant + "/" + p.name;
      const ownerId = owner && owner.pod_id ? owner.pod_id : "";
      const ownerCell = cell(ownerNode(owner, podMap), { className: "owner", "data-owner": ownerId, "data-live": owner && owner.live ? "1" : "0" });
      const placement = el("span", null, [labelList(p.placement_selector, "any pod"), " score " + number(p.placement_score, 2)]);
      return el("tr", { "data-project": ref }, [
        cell(projectLink(p.tenant, p.name)),
        cell(p.status, { className: "status " + statusClass(p.status) }),
        ownerCell,
        cell(number(p.generation), { className: "generation" }),
        cell(p.lifecycle_type),
        cell(placement),
        cell(p.pending_since === null || p.pending_since === undefined ? "—" : ago(p.pending_since), { title: when(p.pending_since) }),
        savedCell(p),
        cell(ago(p.updated_at), { title: when(p.updated_at) }),
      ]);
    });
    fill(byId("projects").tBodies[0], rows, 9, "no projects visible to this token");
    setText(
      "projects-summary",
      projects.length + " project(s)",
      "muted"
    );
  }

  async function overview() {
    const [podList, boss, listed, demand] = await Promise.all([
      pods(),
      master(),
      get("/projects"),
      get("/cluster/demand", true),
    ]);
    const projects = Array.isArray(listed && listed.projects) ? listed.projects.slice() : [];
    projects.sort(function (a, b) {
      return (a.tenant + "/" + a.name).localeCompare(b.tenant + "/" + b.name);
    });
    const podMap = new Map(podList.map(function (p) {
      return [p.id, p];
    }));
    drawPods(podList, boss);
    drawDemand(demand, projects);
    drawProjects(projects, podMap);
    const here = podList.find(function (p) {
      return p.this;
    });
    setText("here", here ? "served by pod " + here.id + " on " + here.node_name : "", "muted");
  }

  // ------------------------------------------------------------------ the project page

  function fact(term, value) {
    return [el("dt", { text: term }), el("dd", null, [value instanceof Node ? value : document.createTextNode(value === null || value === undefined || value === "" ? "—" : String(value))])];
  }

  function detailText(detail) {
    if (detail === null || detail === undefined || detail === "") return "";
    if (typeof detail === "string") return detail;
    try {
      return JSON.stringify(detail);
    } catch (e) {
      return String(detail);
    }
  }

  async function projectPage(tenant, name) {
    const path = projectPath(tenant, name);
    const [project, podList, boss, history, snaps] = await Promise.all([
      get(path, true),
      pods(),
      master(),
      get(path + "/history?limit=" + HISTORY_LIMIT, true),
      get(path + "/snapshots", true),
    ]);
    document.title = "tenure · " + tenant + "/" + name;
    setText("project-title", tenant + "/" + name);
    const podMap = new Map(podList.map(function (p) {
      return [p.id, p];
    }));
    const facts = byId("project-facts");
    if (project === null) {
      facts.replaceChildren(...fact("project", "not found (or not visible to this token)"));
      fill(byId("history").tBodies[0], [], 5, "—");
      fill(byId("snapshots").tBodies[0], [], 7, "—");
      fill(byId("preserved").tBodies[0], [], 8, "—");
      setText("preserved-note", "", "muted");
      setText("history-note", "", "muted");
      setText("snapshots-note", "", "muted");
      return;
    }
    const list = snaps && Array.isArray(snaps.snapshots) ? snaps.snapshots : [];
    const ready = list.filter(function (s) {
      return s.state === "READY";
    });
    const last = ready.length ? ready[ready.length - 1] : null;
    const owner = project.owner || null;
    const masterNote = boss === null ? "not available" : boss && boss.pod_id ? boss.pod_id : "none";
    facts.replaceChildren(
      ...fact("status", el("span", { className: "status " + statusClass(project.status), id: "project-status", text: project.status })),
      ...fact("owner pod", el("span", { id: "project-owner", "data-owner": owner && owner.pod_id ? owner.pod_id : "" }, [ownerNode(owner, podMap)])),
      ...fact("lease runs out in", owner && owner.expires_in !== null && owner.expires_in !== undefined ? number(owner.expires_in, 1) + " s" : "—"),
      ...fact("generation", el("span", { id: "project-generation", text: number(project.generation) })),
      ...fact("type", project.lifecycle_type),
      ...fact("group", project.project_group),
      ...fact("placement", el("span", null, [labelList(project.placement_selector, "any pod"), " score " + number(project.placement_score, 2)])),
      ...fact("pending since", project.pending_since === null || project.pending_since === undefined ? "—" : when(project.pending_since) + " (" + ago(project.pending_since) + ")"),
      ...fact("last checkpoint", last ? last.id + " · " + when(last.created_at) + " (" + ago(last.created_at) + ")" : snaps === null ? "not available" : "none"),
      ...fact("lineage", el("span", { id: "project-lineage", text: number(project.lineage) })),
      ...fact("unsaved since", el("span", { id: "project-unsaved" }, [project.unsaved_since === null || project.unsaved_since === undefined ? (project.running_here ? "nothing unsaved" : "known to the owner pod only") : when(project.unsaved_since) + " (" + ago(project.unsaved_since) + ")"])),
      ...fact("autosave", project.autosave === null || project.autosave === undefined ? "the pod's default" : project.autosave === 0 ? "off" : number(project.autosave, 1) + " s"),
      ...fact("workspace", project.workspace_id),
      ...fact("error", project.error),
      ...fact("created", when(project.created_at)),
      ...fact("updated", when(project.updated_at) + " (" + ago(project.updated_at) + ")"),
      ...fact("cluster master", masterNote)
    );

    const lost = Array.isArray(project.preserved) ? project.preserved : [];
    setText("preserved-note", lost.length ? lost.length + " preserved delta(s): writes a former owner never checkpointed; POST /api/v1/mounts/ID/recover brings one back." : "Nothing lost.", lost.length ? "bad" : "muted");
    fill(
      byId("preserved").tBodies[0],
      lost.map(function (d) {
        return el("tr", { "data-delta": String(d.id) }, [
          cell(el("code", { text: String(d.id) })),
          cell(number(d.files), { title: Array.isArray(d.paths) ? d.paths.join("\n") : "" }),
          cell(number(d.bytes)),
          cell(d.lineage === null || d.lineage === undefined ? "—" : String(d.lineage)),
          cell(number(d.generation)),
          cell(d.pod_id ? el("code", { text: String(d.pod_id) }) : "—"),
          cell(when(d.kept_until)),
          cell(d.recovered_at === null || d.recovered_at === undefined ? "no" : when(d.recovered_at)),
        ]);
      }),
      8,
      "none"
    );

    const events = history && Array.isArray(history.events) ? history.events : [];
    if (history === null) setText("history-note", "Ownership history: not available on this pod.", "muted");
    else setText("history-note", events.length + " event(s), newest first.", "muted");
    fill(
      byId("history").tBodies[0],
      events.map(function (e) {
        const host = podName(podMap, e.pod_id);
        return el("tr", { "data-kind": e.kind === undefined ? "" : String(e.kind) }, [
          cell(when(e.at), { title: ago(e.at) }),
          cell(e.kind === undefined ? "—" : String(e.kind), { className: "kind" }),
          cell(e.pod_id ? [el("code", { text: String(e.pod_id) }), host ? " " + host : ""] : "—", { className: "pod" }),
          cell(e.generation === null || e.generation === undefined ? "—" : String(e.generation)),
          cell(detailText(e.detail)),
        ]);
      }),
      5,
      history === null ? "not available" : "no events"
    );

    setText("snapshots-note", snaps === null ? "Snapshots: not available." : list.length + " snapshot(s); newest first.", "muted");
    fill(
      byId("snapshots").tBodies[0],
      list
        .slice()
        .reverse()
        .slice(0, 20)
        .map(function (s) {
          return el("tr", null, [
            cell(el("code", { text: s.id })),
            cell(s.state),
            cell(number(s.generation)),
            cell(number(s.files)),
            cell(number(s.bytes_new)),
            cell(when(s.created_at)),
            cell(s.head ? "head" : ""),
          ]);
        }),
      7,
      "no snapshots"
    );
  }

  // ------------------------------------------------------------------ the loop

  function route() {
    const match = /^\/ui\/projects\/([^/]+)\/([^/]+)\/?$/.exec(location.pathname);
    if (!match) return { view: "overview" };
    try {
      return { view: "project", tenant: decodeURIComponent(match[1]), name: decodeURIComponent(match[2]) };
    } catch (e) {
      return { view: "overview" };
    }
  }

  const current = route();

  function showError(err) {
    let text;
    if (err instanceof ApiError && err.status === 401) text = "This pod needs an API token: " + err.message;
    else if (err instanceof ApiError) text = "API error " + err.message;
    else text = "Pod not reachable: " + (err && err.message ? err.message : String(err));
    setText("state", text, "error");
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      // nothing stays on screen that this token may not see
      for (const tbody of document.querySelectorAll("tbody")) tbody.replaceChildren();
      byId("project-facts").replaceChildren();
    }
  }

  async function refresh() {
    if (current.view === "project") await projectPage(current.tenant, current.name);
    else await overview();
    setText("state", "updated " + new Date().toISOString().slice(11, 19) + "Z", "muted");
    document.body.setAttribute("data-refreshed", String(Date.now()));
  }

  let timer = null;
  let busy = false;

  async function tick() {
    if (busy) return;
    busy = true;
    clearTimeout(timer);
    try {
      if (!document.hidden) await refresh();
    } catch (err) {
      showError(err);
    } finally {
      busy = false;
      timer = setTimeout(tick, POLL_MS);
    }
  }

  function start() {
    byId(current.view).hidden = false;
    const input = byId("token");
    input.value = token();
    byId("token-form").addEventListener("submit", function (event) {
      event.preventDefault();
      try {
        const value = input.value.trim();
        if (value) sessionStorage.setItem(TOKEN_KEY, value);
        else sessionStorage.removeItem(TOKEN_KEY);
      } catch (e) {
        /* storage refused: the token lives only as long as the field */
      }
      tick();
    });
    byId("token-forget").addEventListener("click", function () {
      input.value = "";
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch (e) {
        /* nothing stored */
      }
      tick();
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) tick();
    });
    tick();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
