"""API views that read through the pages' helpers (metrics, links, logs, alarms, nodes,
allocations) and the token view: the top layer, beside nothing and above dashboard."""
