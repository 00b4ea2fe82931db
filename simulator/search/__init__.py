"""Choosing a configuration without simulating it: AxoNN grids ranked by the analytical
model and screened by a static replay, and the other strategies' candidates, plans and
batches. Below api.py (workload.py's `build_plan` chooses a grid through it); the stages
that simulate candidates through the API live in trials/."""
