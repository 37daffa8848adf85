//! Checks the MPI collectives against what they must deliver, on every rank:
//! `cargo build --release -p widebag-collective --features mpi --example mpi_check`, then
//! `mpirun --allow-run-as-root --oversubscribe -np 3 $CARGO_TARGET_DIR/release/examples/mpi_check`.
//! Prints one `ok` line per rank and exits 0, or panics naming what differed.

#[cfg(feature = "mpi")]
fn main() {
    use widebag_collective::Collective;
    let c = widebag_collective::mpi::MpiCollective::init().expect("MPI initialises once");
    let (me, size) = (c.rank(), c.size());
    // all-to-all with variable counts: d + 1 copies of 10·me + d to rank d.
    let send = (0..size)
        .map(|d| vec![(10 * me + d) as u32; d + 1])
        .collect();
    let got = c.all_to_all_u32(send).unwrap();
    for (src, v) in got.iter().enumerate() {
        assert_eq!(
            v,
            &vec![(10 * src + me) as u32; me + 1],
            "all_to_all from {src}"
        );
    }
    // all-gather of different lengths, and rank-order reductions.
    let g = c.all_gather_f32(&vec![me as f32; me]).unwrap();
    assert!(g.iter().enumerate().all(|(r, v)| v == &vec![r as f32; r]));
    let mut x = vec![0.1 * (me as f32 + 1.0), 1e8 * (me as f32 - 1.0)];
    c.all_reduce_sum(&mut x).unwrap();
    let want: Vec<f32> = (0..2)
        .map(|i| {
            (1..size).fold([0.1f32, -1e8][i], |acc, r| {
                acc + [0.1 * (r as f32 + 1.0), 1e8 * (r as f32 - 1.0)][i]
            })
        })
        .collect();
    assert_eq!(x, want, "all_reduce_sum in rank order");
    let mut m = vec![me as f32];
    c.all_reduce_max(&mut m).unwrap();
    assert_eq!(m, vec![(size - 1) as f32]);
    for _ in 0..1000 {
        c.barrier().unwrap();
    }
    println!("ok: rank {me} of {size}");
}

#[cfg(not(feature = "mpi"))]
fn main() {
    eprintln!("build with --features mpi");
    std::process::exit(2);
}
