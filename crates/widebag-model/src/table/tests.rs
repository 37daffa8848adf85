//! Tests of the row-sharded table: shards against the buffer limit, the host tier's traffic,
//! resident tables, refused ids, no `Clone`, and half-precision rows on every storage.

use super::*;
use crate::table::device_round;
use crate::table::host_rows::half_of;
use widebag_config::{Precision, Rounding};
const F32: RowFormat = RowFormat::F32;

fn ids(ids: &[u32]) -> SortedIds<'_> {
    SortedIds::new(ids).unwrap()
}

#[test]
fn shards_follow_the_buffer_limit_and_round_trip() {
    let device = Device::flex();
    // 10 rows of 4 floats (16 bytes) with a 48-byte limit: 3 rows per shard, 4 shards.
    let t = ShardedTable::from_fn(10, 4, 48, &device, |r, out| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = (r * 10 + j) as f32;
        }
    });
    assert_eq!(t.n_shards(), 4);
    let rows = to_vec(t.gather(ids(&[0, 2, 3, 7, 9])).unwrap()).unwrap();
    let expect: Vec<f32> = [0, 2, 3, 7, 9]
        .iter()
        .flat_map(|&r| (0..4).map(move |j| (r * 10 + j) as f32))
        .collect();
    assert_eq!(rows, expect);

    let mut t = t;
    let delta = floats(vec![1.0; 12], [3, 4], &device);
    t.scatter_add(ids(&[2, 3, 9]), delta).unwrap();
    let all = t.to_vec().unwrap();
    assert_eq!(all[2 * 4], 21.0);
    assert_eq!(all[3 * 4 + 3], 34.0);
    assert_eq!(all[9 * 4 + 1], 92.0);
    assert_eq!(all[4 * 4], 40.0);
}

#[test]
fn a_host_table_moves_only_the_touched_rows() {
    let device = Device::flex();
    let init = |r: usize, out: &mut [f32]| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = (r * 10 + j) as f32;
        }
    };
    let mut host = ShardedTable::placed(
        10,
        4,
        48,
        &device,
        BandPlacement::Host,
        ComputePath::Tensor,
        F32,
        init,
    );
    let mut dev = ShardedTable::placed(
        10,
        4,
        48,
        &device,
        BandPlacement::Device,
        ComputePath::Tensor,
        F32,
        init,
    );
    assert_eq!(host.n_shards(), dev.n_shards());
    let rows = ids(&[0, 2, 3, 7, 9]);
    assert_eq!(host.segments(rows), dev.segments(rows));
    assert_eq!(
        to_vec(host.gather(rows).unwrap()).unwrap(),
        to_vec(dev.gather(rows).unwrap()).unwrap()
    );
    assert_eq!(host.traffic(), (5 * 4 * 4, 0));
    let delta = || floats((0..12).map(|x| x as f32 * 0.5).collect(), [3, 4], &device);
    host.scatter_add(ids(&[2, 3, 9]), delta()).unwrap();
    dev.scatter_add(ids(&[2, 3, 9]), delta()).unwrap();
    assert_eq!(host.to_vec().unwrap(), dev.to_vec().unwrap());
    assert_eq!(host.traffic(), (5 * 4 * 4, 3 * 4 * 4));
    assert_eq!(dev.traffic(), (0, 0));
}

#[test]
fn a_resident_table_is_the_device_table_updated_in_place_without_traffic() {
    // Host kernels: rows on the host path, placed on the device (the host), state too.
    let device = Device::flex();
    let init = |r: usize, out: &mut [f32]| out.iter_mut().for_each(|o| *o = r as f32);
    let placed = |compute_path| {
        ShardedTable::placed(
            10,
            4,
            48,
            &device,
            BandPlacement::Device,
            compute_path,
            F32,
            init,
        )
    };
    let (mut res, mut dev) = (placed(ComputePath::Host), placed(ComputePath::Tensor));
    assert_eq!(res.placement(), BandPlacement::Device);
    let rows = ids(&[1, 4, 8]);
    assert_eq!(
        to_vec(res.gather(rows).unwrap()).unwrap(),
        to_vec(dev.gather(rows).unwrap()).unwrap()
    );
    let delta = || floats((0..12).map(|x| x as f32).collect(), [3, 4], &device);
    res.scatter_add(rows, delta()).unwrap();
    dev.scatter_add(rows, delta()).unwrap();
    assert_eq!(res.to_vec().unwrap(), dev.to_vec().unwrap());
    assert_eq!(res.traffic(), (0, 0));
    let state = res.zeros_like(2, 48, F32);
    assert!(state.resident && state.placement() == BandPlacement::Device);
}

#[test]
fn unsorted_or_out_of_range_ids_are_refused_not_a_panic() {
    // Unsorted ids once underflowed the host update's offset arithmetic.
    let device = Device::flex();
    for placement in [BandPlacement::Host, BandPlacement::Device] {
        let compute_path = ComputePath::Tensor;
        let mut t =
            ShardedTable::placed(10, 4, 48, &device, placement, compute_path, F32, |_, o| {
                o.fill(1.0)
            });
        assert!(SortedIds::new(&[9, 2]).is_err());
        assert!(SortedIds::new(&[2, 2]).is_err());
        let delta = || floats(vec![1.0; 8], [2, 4], &device);
        let err = t.scatter_add(ids(&[2, 10]), delta()).unwrap_err();
        assert!(matches!(err, ModelError::Ids(_)), "{err}");
        assert!(t.gather(ids(&[10])).is_err());
        assert_eq!(t.to_vec().unwrap(), vec![1.0; 40], "nothing written");
    }
}

/// Whether `T` implements `Clone`, by method resolution (autoref specialisation).
struct Probe<T>(std::marker::PhantomData<T>);
trait IsClone {
    fn is_clone(&self) -> bool {
        true
    }
}
impl<T: Clone> IsClone for Probe<T> {}
trait NotClone {
    fn is_clone(&self) -> bool {
        false
    }
}
impl<T> NotClone for &Probe<T> {}

#[test]
#[allow(clippy::needless_borrow)] // the borrow selects which `is_clone` answers
fn tables_and_their_optimizer_state_cannot_be_cloned() {
    // A clone would keep a second handle to the shards and silently turn every in-place
    // update into a whole-table copy.
    use crate::table::optim::TableState;
    assert!(!(&Probe::<ShardedTable>(std::marker::PhantomData)).is_clone());
    assert!(!(&Probe::<TableState>(std::marker::PhantomData)).is_clone());
    assert!(
        (&Probe::<Segment>(std::marker::PhantomData)).is_clone(),
        "the probe works"
    );
}

#[test]
fn half_tables_store_two_bytes_and_round_updates_alike_on_every_storage() {
    let device = Device::flex();
    let init = |r: usize, out: &mut [f32]| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = 1.0 + r as f32 * 0.25 + j as f32 / 3.0;
        }
    };
    for precision in [Precision::F16, Precision::Bf16] {
        let half = half_of(precision).unwrap();
        for rounding in [Rounding::Nearest, Rounding::Stochastic] {
            let format = RowFormat {
                precision,
                rounding,
                seed: 11,
            };
            let make = |placement, compute_path| {
                ShardedTable::placed(10, 4, 48, &device, placement, compute_path, format, init)
            };
            let mut tables = [
                make(BandPlacement::Host, ComputePath::Tensor),
                make(BandPlacement::Device, ComputePath::Host),
                make(BandPlacement::Device, ComputePath::Tensor),
            ];
            let rows = ids(&[1, 2, 9]);
            let first = to_vec(tables[0].gather(rows).unwrap()).unwrap();
            // Initial rows are the f32 layout's rounded to the nearest, and gathered as f32.
            let mut want = vec![0.0; 4];
            init(2, &mut want);
            let want: Vec<f32> = want.iter().map(|&x| half.to_f32(half.nearest(x))).collect();
            assert_eq!(first[4..8], want[..]);
            let delta: Vec<f32> = (0..12).map(|x| 1e-3 * x as f32).collect();
            let mut after = Vec::new();
            for t in &mut tables {
                assert_eq!(t.bytes(), 10 * 4 * 2);
                assert_eq!(to_vec(t.gather(rows).unwrap()).unwrap(), first);
                t.set_update_step(3);
                t.scatter_add(rows, floats(delta.clone(), [3, 4], &device))
                    .unwrap();
                after.push(t.to_vec().unwrap());
            }
            assert_eq!((first.len(), delta.len()), (12, 12));
            for (i, (&x, d)) in first.iter().zip(&delta).enumerate() {
                let (row, col) = ([1, 2, 9][i / 4], i % 4);
                let got = after[0][row * 4 + col];
                assert_eq!(half.to_f32(half.nearest(got)), got, "a value of the format");
                let lo_hi = (x + d - got).abs();
                let step = (half.to_f32(half.nearest(got).wrapping_add(1)) - got).abs();
                assert!(lo_hi <= step, "{got} is a neighbour of {}", x + d);
                if rounding == Rounding::Nearest {
                    assert_eq!(got, half.to_f32(half.nearest(x + d)));
                }
            }
            // Host tier and resident rows round with the same bits; the device path's uniforms
            // are those bits' top 24, so it agrees but for values within 2⁻²⁴ of a threshold.
            assert_eq!(after[0], after[1], "{precision:?} {rounding:?}");
            assert_eq!(after[0].len(), after[2].len());
            let differ = after[0]
                .iter()
                .zip(&after[2])
                .filter(|(a, b)| a != b)
                .count();
            assert!(differ <= 1, "{precision:?} {rounding:?}: {differ} differ");
            // Untouched rows are unchanged.
            assert_eq!(after[2][..4], after[0][..4]);
        }
    }
}

/// Whether `WIDEBAG_REQUIRE_<facility>=1`: the integration tests' convention
/// (`tests/integration/common/mod.rs`, `require`), read here because a unit test cannot use that
/// crate's helper. A facility that is missing is a skip notice, or a failure when required.
fn require(test: &str, facility: &str, available: bool, why: &str) -> bool {
    let var = format!("WIDEBAG_REQUIRE_{facility}");
    if available {
        return true;
    }
    assert!(
        std::env::var(&var).as_deref() != Ok("1"),
        "{test}: {var}=1 but {facility} is missing here: {why}"
    );
    eprintln!(
        "{test}: skipped, {facility} is missing here: {why} (set {var}=1 to make this a failure)"
    );
    false
}

#[test]
fn device_rounding_on_lavapipe_is_unbiased_when_an_adapter_opens() {
    // The wgpu path's f16 is the one lavapipe supports. A format the adapter does not store
    // (lavapipe's bf16) is not skipped in silence: a table of it is refused, naming the key.
    // flex runs both formats (`device_round::tests`); a GPU with bf16 runs it here.
    let test = "device_rounding_on_lavapipe_is_unbiased_when_an_adapter_opens";
    let compute = crate::device::open_device(widebag_config::DeviceChoice::Wgpu);
    let why = compute
        .as_ref()
        .err()
        .map(|e| format!("no wgpu adapter ({e})"));
    let Ok(compute) = compute else {
        require(test, "WGPU", false, &why.unwrap_or_default());
        return;
    };
    for half in device_round::tests::check_unbiased(&compute.device) {
        let precision = match half {
            Half::F16 => Precision::F16,
            Half::Bf16 => Precision::Bf16,
        };
        let mut config = widebag_config::Config::default();
        config.model.input_bands.dtype = vec![precision];
        let refused = crate::device::check_precisions(&config, &compute, 1);
        assert!(
            matches!(
                &refused,
                Err(ModelError::Unsupported { key: "model.input_bands.dtype", message })
                    if message.contains("does not support it")
            ),
            "{precision:?}: the adapter does not store it, yet {refused:?}"
        );
        let why = format!(
            "{} does not store {precision:?} (its refusal was checked instead)",
            compute.adapter
        );
        match half {
            Half::Bf16 => {
                require(test, "BF16", false, &why);
            }
            Half::F16 => eprintln!("{test}: {why}"),
        }
    }
}
