"""Table-driven kernel classification, collective names and shapes across eras and vendors."""

from __future__ import annotations

import pytest

from validation.trace.classify import classify_kernel, collective_from_kernel_name, collective_kind
from validation.trace.comm import c10d_sizes, parse_ranks
from validation.trace.shapes import dtype_size, gemm_shape, numel

# (kernel name as found in traces, kind, family); era / vendor in the id.
KERNELS = [
    # cuBLAS on V100 (2022-23) and A100
    ("volta_sgemm_128x32_nt", "gemm", "cublas"),
    ("ampere_sgemm_32x128_tn", "gemm", "cublas"),
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const> >()",
        "gemm",
        "cublas",
    ),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>()",
        "gemm",
        "cublas",
    ),
    (
        "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(cublasSplitKParams<float>)",
        "gemm",
        "cublas",
    ),
    (
        "void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<float const> > >()",
        "gemm",
        "cublas",
    ),
    (
        "void magma_sgemmEx_kernel<float, float, float, true, false, 6, 4, 6, 3, 4>(int, int, int)",
        "gemm",
        "cublas",
    ),
    # H100 cuBLASLt / CUTLASS (2025)
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "gemm",
        "cublas",
    ),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)",
        "gemm",
        "cutlass",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
        "gemm",
        "cutlass",
    ),
    # ROCm: hipBLASLt / rocBLAS Tensile and Composable Kernel
    (
        "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1",
        "gemm",
        "tensile",
    ),
    (
        "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM",
        "gemm",
        "tensile",
    ),
    (
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<256, 128> >(ck::Argument)",
        "gemm",
        "ck",
    ),
    # convolutions (cuDNN implicit GEMM)
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16",
        "gemm",
        "conv",
    ),
    (
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc>()",
        "gemm",
        "conv",
    ),
    # attention
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Flash_fwd_params)",
        "attention",
        "flash",
    ),
    (
        "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128> >(Flash_bwd_params)",
        "attention",
        "flash",
    ),
    (
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t>::Params)",
        "attention",
        "fmha",
    ),
    ("attn_fwd", "attention", "flash"),
    ("void at::native::_efficient_attention_backward_kernel()", "attention", "flash"),
    # NCCL / RCCL across eras (the collective kind is resolved separately)
    ("ncclAllReduceRingLLKernel_sum_f32(ncclWorkElem)", "collective", "nccl"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "collective", "nccl"),
    (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "collective",
        "nccl",
    ),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "collective", "nccl"),
    ("rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)", "collective", "rccl"),
    # optimizer, quantize, elementwise families
    (
        "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float>()",
        "optimizer",
        "fused",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_hfp8_gpu(at::Tensor const&)>()",
        "quantize",
        "quantize",
    ),
    (
        "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)",
        "elementwise",
        "other",
    ),
    (
        "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float>()",
        "elementwise",
        "embedding",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)",
        "elementwise",
        "norm",
    ),
    (
        "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)",
        "elementwise",
        "norm",
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>()",
        "elementwise",
        "softmax",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >()",
        "elementwise",
        "reduce",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>()",
        "elementwise",
        "copy",
    ),
    ("triton__0d1d2d3d", "elementwise", "triton"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >()",
        "elementwise",
        "other",
    ),
]


@pytest.mark.parametrize(("name", "kind", "family"), KERNELS, ids=[k[0][:40] for k in KERNELS])
def test_kernel_classification(name: str, kind: str, family: str) -> None:
    assert classify_kernel(name) == (kind, family)


COLLECTIVES = [
    ("allreduce", "all-reduce"),
    ("_allgather_base", "all-gather"),
    ("all_gather_into_tensor_coalesced", "all-gather"),
    ("_reduce_scatter_base", "reduce-scatter"),
    ("reduce_scatter_tensor_coalesced", "reduce-scatter"),
    ("all_to_all", "all-to-all"),
    ("all_to_allv", "all-to-all"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("send", "send-recv"),
    ("recv", "send-recv"),
    ("barrier", "all-reduce"),
    ("nccl:_all_gather_base", "all-gather"),
    ("nccl:all_to_all", "all-to-all"),
    ("gloo:all_reduce", "all-reduce"),
    ("c10d::alltoall_base_", "all-to-all"),
    ("c10d::_reduce_scatter_base_", "reduce-scatter"),
    ("c10d::allreduce_", "all-reduce"),
    ("c10d::broadcast_", "broadcast"),
    ("AllReduce", "all-reduce"),
    ("SendRecv", "send-recv"),
    ("wait", None),
    ("aten::mm", None),
]


@pytest.mark.parametrize(("text", "kind"), COLLECTIVES)
def test_collective_kind_from_any_spelling(text: str, kind: str | None) -> None:
    assert collective_kind(text) == kind


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclAllReduceRingLLKernel_sum_f32(ncclWorkElem)", ("all-reduce", "AllReduce")),
        (
            "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            ("broadcast", "Broadcast"),
        ),
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            ("reduce-scatter", "ReduceScatter"),
        ),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", ("send-recv", "SendRecv")),
        ("rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)", None),
    ],
)
def test_collective_from_kernel_name(name: str, expected: tuple[str, str] | None) -> None:
    assert collective_from_kernel_name(name) == expected


GEMMS = [
    ("aten::mm", [[16, 512], [512, 512]], (16, 512, 512, 1)),
    ("aten::addmm", [[256], [16, 13], [13, 256], [], []], (16, 256, 13, 1)),
    ("aten::bmm", [[16, 27, 16], [16, 16, 27]], (27, 27, 16, 16)),
    ("aten::baddbmm", [[4, 8, 8], [4, 8, 32], [4, 32, 8], [], []], (8, 8, 32, 4)),
    ("aten::matmul", [[2, 3, 64, 32], [32, 16]], (64, 16, 32, 6)),
    ("aten::linear", [[8, 559, 1024], [2816, 1024], [2816]], (4472, 2816, 1024, 1)),
    ("aten::_scaled_mm", [[4096, 1024], [1024, 2048], [], []], (4096, 2048, 1024, 1)),
]


@pytest.mark.parametrize(("op", "dims", "mnkb"), GEMMS, ids=[g[0] for g in GEMMS])
def test_gemm_shape_and_flops(op: str, dims: list[object], mnkb: tuple[int, int, int, int]) -> None:
    shape = gemm_shape(op, dims, ["float"] * len(dims))
    assert shape is not None
    assert (shape.m, shape.n, shape.k, shape.batch) == mnkb
    assert shape.flops == 2 * mnkb[0] * mnkb[1] * mnkb[2] * mnkb[3]


@pytest.mark.parametrize("dims", [None, [], [[], []], [[16, 512]], "[[16, 512]]"])
def test_gemm_shape_unreadable_dims_give_none(dims: object) -> None:
    assert gemm_shape("aten::mm", dims, None) is None


@pytest.mark.parametrize(
    ("name", "size"),
    [("float", 4), ("Float", 4), ("c10::BFloat16", 2), ("BFloat16", 2), ("Half", 2), ("long int", 8), ("Long", 8),
     ("int", 4), ("Int", 4), ("unsigned char", 1), ("signed char", 1), ("Byte", 1), ("double", 8),
     ("c10::Float8_e4m3fn", 1), ("mystery", 0)],
)  # fmt: skip
def test_dtype_sizes(name: str, size: int) -> None:
    assert dtype_size(name) == size


def test_c10d_dims_give_full_buffer_and_group_size() -> None:
    assert c10d_sizes("c10d::_allgather_base_", [[4096], [1024], [], []]) == (4096, 4)
    assert c10d_sizes("c10d::_reduce_scatter_base_", [[8192, 384], [65536, 384], [], [], []]) == (
        65536 * 384,
        8,
    )
    assert c10d_sizes("c10d::alltoall_base_", [[768], [3392], [], [], [], []]) == (3392, 0)
    assert c10d_sizes("c10d::allreduce_", [[[64, 64]], [], [], []]) == (4096, 0)
    assert c10d_sizes("c10d::allreduce_", [[], [], [], []]) == (0, 0)
    assert numel([[[2048]], [[1024], [1024]]]) == 4096


def test_process_group_ranks_parse_from_strings_and_lists() -> None:
    assert parse_ranks("[0, 1, 2, 3]") == (0, 1, 2, 3)
    assert parse_ranks([4, 5]) == (4, 5)
    assert parse_ranks(None) == ()
