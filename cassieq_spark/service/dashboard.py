"""A small queue dashboard: ``GET /dashboard`` is a static page that asks for the admin key
and then polls ``GET /dashboard/queues`` (the admin or the metrics key required) for every queue's backlog,
in-flight count, oldest age, totals and dead letters, drawing rates from two polls.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .admin import check_metrics
from .responses import json_response
from .state import Service

log = logging.getLogger(__name__)


async def queues(request: Request) -> Response:
    """Every queue's stats from the snapshot :mod:`.metrics` keeps (refreshed in the
    background, at most :data:`~.metrics.QUEUE_STATS_SECONDS` old): no engine call here."""
    service: Service = request.app.state.service
    check_metrics(request, service)
    stats = service.metrics.queue_stats()
    keep = [
        "queue",
        "account",
        "backlog",
        "in_flight",
        "delayed",
        "oldest_age_seconds",
        "enqueued",
        "acked",
        "dead_lettered",
        "dropped",
        "dead_letter_queue",
    ]
    return json_response([{k: s.get(k) for k in keep} for s in stats])


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cassieq queues</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
#status{color:#666;margin:1em 0}
</style></head><body>
<h1>cassieq queues</h1>
<form id="login"><label>Admin or metrics key <input id="key" type="password" size="50"></label>
<button type="submit">Show</button></form>
<div id="status">Enter the admin or the metrics key.</div>
<table id="queues"><thead><tr><th>queue</th><th>backlog</th><th>in flight</th><th>delayed</th>
<th>oldest age (s)</th><th>enqueued</th><th>acked</th><th>acks/s</th><th>dead letters</th>
<th>dead-letter queue</th></tr></thead><tbody></tbody></table>
<script>
let key = sessionStorage.getItem("cassieq-admin-key") || "";
let last = null;
function cell(tr, v){const td=document.createElement("td");td.textContent=v;tr.appendChild(td);}
async function refresh(){
  if(!key){return;}
  const r = await fetch("/dashboard/queues",{headers:{"Authorization":"Key "+key}});
  const status = document.getElementById("status");
  if(!r.ok){status.textContent="HTTP "+r.status+": check the key";return;}
  const rows = await r.json(); const now = Date.now()/1000;
  const body = document.querySelector("#queues tbody"); body.innerHTML="";
  for(const q of rows){
    const tr=document.createElement("tr"); tr.dataset.queue=q.queue;
    let rate="";
    if(last && last.rows[q.queue]!==undefined && now>last.at){
      rate=((q.acked-last.rows[q.queue])/(now-last.at)).toFixed(1);}
    [q.queue,q.backlog,q.in_flight,q.delayed,q.oldest_age_seconds,q.enqueued,q.acked,rate,
     q.dead_lettered,q.dead_letter_queue||""].forEach(v=>cell(tr,v));
    body.appendChild(tr);
  }
  last={at:now,rows:Object.fromEntries(rows.map(q=>[q.queue,q.acked]))};
  status.textContent=rows.length+" queues, updated "+new Date().toLocaleTimeString();
}
document.getElementById("login").addEventListener("submit",e=>{e.preventDefault();
  key=document.getElementById("key").value.trim();sessionStorage.setItem("cassieq-admin-key",key);
  refresh();});
refresh(); setInterval(refresh, 5000);
</script></body></html>
"""


async def page(request: Request) -> Response:
    return HTMLResponse(
        PAGE, headers={"Content-Security-Policy": "default-src 'self' 'unsafe-inline'"}
    )


ROUTES = [
    Route("/dashboard", page, methods=["GET"]),
    Route("/dashboard/queues", queues, methods=["GET"]),
]
