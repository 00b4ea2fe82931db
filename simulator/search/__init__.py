"""Choosing a configuration: AxoNN grids ranked by the analytical model and screened
by a static replay, and the other strategies' candidates, plans and batches."""
