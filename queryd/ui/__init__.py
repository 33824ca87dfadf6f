"""The auditor's web view over queryd, served under ``/ui/`` (`install`).

The page in the browser reads only queryd's public HTTP API; the server renders plain
HTML only for the log list, the timeline and one event (the views that work without
JavaScript), from the same queries the API routes call. `queryd.ui.router.install`
mounts it (`create_app` does).
"""
