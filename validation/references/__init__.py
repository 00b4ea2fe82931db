"""What real PyTorch and its tools say, beside axsim's models: FSDP's own memory accounting
(fsdp_memory), the kernels a real transformer block launches (block_kernels), and HTA's
analyses of axsim's simulated traces (hta_summary).
"""
