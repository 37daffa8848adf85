//! Runs the collectives' self-check (`widebag_collective::check`) over MPI on every rank:
//! `cargo build --release --manifest-path crates/widebag-mpi/Cargo.toml --example mpi_check`, then
//! `mpirun --allow-run-as-root --oversubscribe -np 3 $CARGO_TARGET_DIR/release/examples/mpi_check`.
//! Prints one `ok` line per rank and exits 0, or names what differed and exits 1.

fn main() {
    use widebag_collective::Collective;
    let c = widebag_mpi::MpiCollective::init().expect("MPI initialises once");
    match widebag_collective::check::self_check(&c) {
        Ok(()) => println!("ok: rank {} of {}", c.rank(), c.size()),
        Err(e) => {
            eprintln!("mpi_check failed: {e}");
            std::process::exit(1);
        }
    }
}
