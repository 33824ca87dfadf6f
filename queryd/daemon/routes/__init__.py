"""The daemon's routes, one `APIRouter` a group: service, audit, graph, live."""
