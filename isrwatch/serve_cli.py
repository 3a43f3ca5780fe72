"""`isrwatch serve`: the API and dashboards on uvicorn; `isrwatch dashboards export`: the pages as static HTML."""

from __future__ import annotations

import argparse
from typing import Any

from foundation.logs import logger
from foundation.settings import SettingsError, load_settings
from isrwatch.arguments import lakehouse_root

log = logger("serve")


def add_serve_parsers(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve the HTTP API and the dashboards",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s.add_argument("--config", default=None, help="settings file (default conf/pipeline.yaml)")
    s.add_argument("--lakehouse", type=lakehouse_root, default=None,
                   help="lakehouse root (overrides the settings file)")
    s.add_argument("--host", default=None, help="bind address (default api.host: 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default api.port: 8080)")
    s.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    d = sub.add_parser("dashboards", help="dashboard pages as static HTML")
    dsub = d.add_subparsers(dest="dashboards_command", required=True)
    e = dsub.add_parser("export", help="write every dashboard page (and plotly.js) to a folder",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e.add_argument("--out", required=True, help="output folder (created if missing)")
    e.add_argument("--config", default=None, help="settings file (default conf/pipeline.yaml)")
    e.add_argument("--lakehouse", type=lakehouse_root, default=None,
                   help="lakehouse root (overrides the settings file)")
    e.add_argument("--cluster", default=None, help="cluster (run id); default: the one with the newest data")
    e.add_argument("--window-minutes", type=int, default=None, help="time window ending at the newest data")


def main_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app

    try:
        settings = load_settings(args.config, {"lakehouse": args.lakehouse, "api.host": args.host,
                                               "api.port": args.port})
        app = create_app(settings)
    except (SettingsError, ValueError) as e:
        log.error(f"isrwatch serve: {e}")
        return 2
    host, port = settings.api.host, settings.api.port
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    mutations = "enabled (bearer token set)" if app.state.settings.token else "disabled: set ISRWATCH_API_TOKEN"
    print(f"isrwatch serve: lakehouse {settings.lakehouse}\n"
          f"  dashboards  http://{shown}:{port}/\n  API docs    http://{shown}:{port}/docs\n"
          f"  mutations   {mutations}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=args.log_level)
    print("isrwatch serve: stopped", flush=True)
    return 0


def main_dashboards(args: argparse.Namespace) -> int:
    from dashboards.export import export_pages
    from lakehouse_read.freshness import Freshness
    from lakehouse_read.reader import LakehouseReader

    try:
        settings = load_settings(args.config, {"lakehouse": args.lakehouse})
    except SettingsError as e:
        log.error(f"isrwatch dashboards: {e}")
        return 2
    if args.window_minutes is not None and args.window_minutes <= 0:
        log.error("isrwatch dashboards: --window-minutes must be > 0")
        return 2
    settings.use_storage()
    notices = Freshness(settings.lakehouse, settings.checkpoint_root).warnings()
    for notice in notices:
        log.warning(f"isrwatch dashboards: {notice}")
    written = export_pages(LakehouseReader(settings.lakehouse), args.out, cluster=args.cluster,
                           window_minutes=args.window_minutes, notices=notices)
    print(f"isrwatch dashboards: wrote {len(written)} files to {args.out}")
    return 0
