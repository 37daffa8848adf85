//! The collectives over MPI (rsmpi, `--features mpi`; Debian: `libopenmpi-dev openmpi-bin
//! libclang-dev`): variable counts are exchanged first (an all-to-all or all-gather of one count
//! per rank), then the data with MPI's `*v` collectives. Reductions keep the trait's rank-order
//! combination, so every rank holds the bits a single process would compute.
//! `mpirun --allow-run-as-root --oversubscribe -np 3 target/release/examples/mpi_check` checks it.

use mpi::datatype::{Equivalence, Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives};

use widebag_collective::{Collective, CollectiveError};

/// This process's rank of `MPI_COMM_WORLD`. MPI is finalised when it is dropped.
pub struct MpiCollective {
    world: SimpleCommunicator,
    _universe: Universe,
}

impl std::fmt::Debug for MpiCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MpiCollective({}/{})", self.rank(), self.size())
    }
}

impl MpiCollective {
    /// Initialises MPI; `None` when it was initialised already in this process.
    pub fn init() -> Option<Self> {
        let universe = mpi::initialize()?;
        Some(Self {
            world: universe.world(),
            _universe: universe,
        })
    }

    fn displacements(counts: &[i32]) -> Vec<i32> {
        counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect()
    }

    fn all_to_all_v<T: Equivalence + Copy + Default>(
        &self,
        send: Vec<Vec<T>>,
    ) -> Result<Vec<Vec<T>>, CollectiveError> {
        let size = self.size();
        if send.len() != size {
            return Err(CollectiveError::Destinations {
                op: "all_to_all",
                got: send.len(),
                size,
            });
        }
        let counts: Vec<i32> = send.iter().map(|v| v.len() as i32).collect();
        let mut recv_counts = vec![0i32; size];
        self.world
            .all_to_all_into(&counts[..], &mut recv_counts[..]);
        let flat: Vec<T> = send.into_iter().flatten().collect();
        let total: i32 = recv_counts.iter().sum();
        let mut recv = vec![T::default(); total as usize];
        {
            let send_displs = Self::displacements(&counts);
            let recv_displs = Self::displacements(&recv_counts);
            let sp = Partition::new(&flat[..], &counts[..], &send_displs[..]);
            let mut rp = PartitionMut::new(&mut recv[..], &recv_counts[..], &recv_displs[..]);
            self.world.all_to_all_varcount_into(&sp, &mut rp);
        }
        Ok(split(&recv, &recv_counts))
    }
}

/// `flat` cut into consecutive parts of `counts` elements, one per rank.
fn split<T: Copy>(flat: &[T], counts: &[i32]) -> Vec<Vec<T>> {
    let mut rest = flat;
    counts
        .iter()
        .map(|&c| {
            let (part, tail) = rest.split_at(c as usize);
            rest = tail;
            part.to_vec()
        })
        .collect()
}

impl Collective for MpiCollective {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn all_to_all_u32(&self, send: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>, CollectiveError> {
        self.all_to_all_v(send)
    }

    fn all_to_all_f32(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, CollectiveError> {
        self.all_to_all_v(send)
    }

    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<Vec<f32>>, CollectiveError> {
        let size = self.size();
        let mut counts = vec![0i32; size];
        self.world
            .all_gather_into(&(local.len() as i32), &mut counts[..]);
        let total: i32 = counts.iter().sum();
        let mut all = vec![0.0f32; total as usize];
        {
            let displs = Self::displacements(&counts);
            let mut rp = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(local, &mut rp);
        }
        Ok(split(&all, &counts))
    }

    fn barrier(&self) -> Result<(), CollectiveError> {
        self.world.barrier();
        Ok(())
    }
}
