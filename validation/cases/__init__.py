"""`axsim validate`: published numbers as cases (case), the AxoNN tables and the runner
(validate), the Fig. 7 split (split), collective curves (collectives), the seed papers'
claims and their ratio cases (claims, claim_ratios), and published FSDP / DeepSpeed runs
(framework_runs).
"""
