//! Between burn's tensors and widebag's CubeCL kernels: a wgpu tensor's buffer taken out of
//! burn's fusion queue (the operations queued before it run first) as a [`CubeTensor`], and a
//! kernel's output handed back to burn as a tensor. Other devices (flex) give `None`.

use burn::tensor::{Device, Int, Tensor};
use burn_cubecl::fusion::CubeFusionHandle;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{Cube, CubeBackend};
use burn_fusion::stream::StreamId;
use burn_fusion::{NoOp, get_client};
use burn_ir::{InitOperationIr, OperationIr, OperationOutput};

/// Whether tensors on `device` live on a cubecl runtime (wgpu), not on flex.
pub fn on_cubecl(device: &Device) -> bool {
    !crate::device::is_flex(device)
}

/// The contiguous buffer of float tensor `t` when it lives on a cubecl device (wgpu).
pub fn float_in<const D: usize>(t: Tensor<D>) -> Option<CubeTensor> {
    let fused = t.try_into_primitive::<Cube>().ok()?;
    let client = fused.client.clone();
    Some(into_contiguous(
        client.resolve_tensor_float::<CubeBackend>(fused),
    ))
}

/// The contiguous buffer of int tensor `t` when it lives on a cubecl device (wgpu).
pub fn int_in<const D: usize>(t: Tensor<D, Int>) -> Option<CubeTensor> {
    let fused = t.try_into_primitive::<Cube>().ok()?;
    let client = fused.client.clone();
    Some(into_contiguous(
        client.resolve_tensor_int::<CubeBackend>(fused),
    ))
}

/// `t`'s buffer as a burn float tensor (registered with the fusion queue of its device).
pub fn float_out<const D: usize>(t: CubeTensor) -> Tensor<D> {
    let client = get_client::<CubeBackend>(&t.device);
    let (shape, dtype) = (t.meta.shape().clone(), t.dtype);
    let handle: CubeFusionHandle = t.into();
    let desc = InitOperationIr::create(shape, dtype, || client.register_tensor_handle(handle));
    let fused = client
        .register(
            StreamId::current(),
            OperationIr::Init(desc),
            NoOp::<CubeBackend>::new(),
        )
        .output();
    Tensor::from_primitive::<Cube>(fused)
}
