//! Runs the collectives' self-check (`widebag_collective::check`) over MPI on every rank:
//! `cargo build --release -p widebag-collective --features mpi --example mpi_check`, then
//! `mpirun --allow-run-as-root --oversubscribe -np 3 $CARGO_TARGET_DIR/release/examples/mpi_check`.
//! Prints one `ok` line per rank and exits 0, or names what differed and exits 1.

#[cfg(feature = "mpi")]
fn main() {
    use widebag_collective::Collective;
    let c = widebag_collective::mpi::MpiCollective::init().expect("MPI initialises once");
    match widebag_collective::check::self_check(&c) {
        Ok(()) => println!("ok: rank {} of {}", c.rank(), c.size()),
        Err(e) => {
            eprintln!("mpi_check failed: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn main() {
    eprintln!("build with --features mpi");
    std::process::exit(2);
}
