//! A flex tensor's buffer as a host slice, without a copy: flex keeps a uniquely held, contiguous
//! tensor's bytes when it is read out (`into_data`) and when it is made again (`from_data`), so a
//! parameter can be taken out of its tensor, updated in place by a host kernel and put back.

use burn::tensor::{Device, Tensor, TensorData};

use crate::error::ModelError;

/// A tensor's values held on the host, row-major, with the tensor's shape.
pub struct HostMatrix {
    data: TensorData,
    pub rows: usize,
    pub cols: usize,
}

impl HostMatrix {
    /// `t`'s values: its own buffer when `t` is the only handle to a contiguous flex tensor,
    /// else a copy.
    pub fn take(t: Tensor<2>) -> Result<Self, ModelError> {
        let [rows, cols] = t.shape().dims();
        let data = t.into_data().convert::<f32>();
        if data.as_slice::<f32>().is_err() {
            return Err(ModelError::Read("a host view of a non-f32 tensor".into()));
        }
        Ok(Self { data, rows, cols })
    }

    /// `values` as a `[rows, cols]` matrix, row-major (no copy).
    pub fn from_vec(values: Vec<f32>, rows: usize, cols: usize) -> Self {
        assert_eq!(values.len(), rows * cols, "a [{rows}, {cols}] matrix");
        Self {
            data: TensorData::new(values, [rows, cols]),
            rows,
            cols,
        }
    }

    /// Zeros of `[rows, cols]`.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Self {
            data: TensorData::new(vec![0.0f32; rows * cols], [rows, cols]),
            rows,
            cols,
        }
    }

    pub fn as_slice(&self) -> &[f32] {
        self.data
            .as_slice::<f32>()
            .expect("checked f32 at construction")
    }

    /// Row `r`'s values.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.as_slice()[r * self.cols..(r + 1) * self.cols]
    }

    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        self.data
            .as_mut_slice::<f32>()
            .expect("checked f32 at construction")
    }

    /// Back into a tensor on `device` (flex: the same buffer).
    pub fn into_tensor(self, device: &Device) -> Tensor<2> {
        Tensor::from_data(self.data, device)
    }
}

/// Runs `f` on `t`'s values in place: `t` is taken out of its slot, read as a [`HostMatrix`]
/// and put back, so on flex no byte is copied while `t` has one handle.
pub fn update_in_place<R>(
    t: &mut Tensor<2>,
    f: impl FnOnce(&mut [f32]) -> R,
) -> Result<R, ModelError> {
    let device = t.device();
    let taken = std::mem::replace(t, Tensor::empty([0, 0], &device));
    let mut m = HostMatrix::take(taken)?;
    let out = f(m.as_mut_slice());
    *t = m.into_tensor(&device);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensors::{floats, to_vec};

    #[test]
    fn a_flex_tensor_held_once_is_read_and_rebuilt_without_a_copy() {
        let device = Device::flex();
        let t = floats((0..12).map(|x| x as f32).collect(), [3, 4], &device);
        let m = HostMatrix::take(t).unwrap();
        let before = m.as_slice().as_ptr();
        let t = m.into_tensor(&device);
        let again = HostMatrix::take(t).unwrap();
        assert_eq!(again.as_slice().as_ptr(), before, "the same buffer");
        assert_eq!((again.rows, again.cols), (3, 4));

        let mut t = again.into_tensor(&device);
        update_in_place(&mut t, |v| v.iter_mut().for_each(|x| *x *= 2.0)).unwrap();
        assert_eq!(to_vec(t.clone()).unwrap()[5], 10.0);
        // A second handle is left alone: the update went to a copy.
        let other = t.clone();
        update_in_place(&mut t, |v| v[0] = 99.0).unwrap();
        assert_eq!(to_vec(other).unwrap()[0], 0.0);
        assert_eq!(to_vec(t).unwrap()[0], 99.0);
    }
}
