"""The kernel model's terms from GPU traces: the evidence kernel by kernel (evidence), the
fits of each term (fits), their assembly per GPU type (terms), and the leave-one-trace-out
check that predicts each trace from the others (leave_one_out).
"""
