//! What `[model]` and `[optim]` say about the layers once read together: the output layer's
//! input size, each layer's activation, and the optimizer the input table really has.

use crate::choices::{Activation, TableOptim};
use crate::schema::{Config, ModelConfig};

impl ModelConfig {
    /// Size of the last hidden representation (the output layer's input).
    pub fn last_hidden(&self) -> usize {
        self.hidden.last().copied().unwrap_or(self.dim)
    }

    /// Each layer's activation: the bag's, then each hidden layer's.
    pub fn activations(&self) -> Vec<Activation> {
        let n = self.hidden.len() + 1;
        (0..n)
            .map(|k| match (k + 1 == n, self.last_activation) {
                (true, Some(last)) => last,
                _ => self.activation,
            })
            .collect()
    }
}

impl Config {
    /// The input table's optimizer: `optim.table`, or none of its own (SGD's empty state, never
    /// stepped) when `model.tie_output` makes the table the output layer's weight, which
    /// `optim.dense` updates.
    pub fn table_optim(&self) -> TableOptim {
        match self.model.tie_output {
            true => TableOptim::Sgd,
            false => self.optim.table,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::error::ConfigError;
    use crate::loader::load;
    use crate::schema::Config;

    fn sets(args: &[&str]) -> Result<Config, ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        load(None, &args)
    }

    #[test]
    fn a_tied_output_takes_the_table_off_its_optimizer_and_refuses_what_it_cannot_tie() {
        let tied = [
            "model.tie_output=true",
            "model.hidden=[]",
            "data.n_classes=240000",
        ];
        let c = sets(&tied).unwrap();
        assert_eq!(c.table_optim(), crate::choices::TableOptim::Sgd);
        assert_eq!(sets(&tied[1..]).unwrap().table_optim(), c.optim.table);
        for (bad, says) in [
            ("model.hidden=[64]", "last of model.hidden is 64"),
            ("data.n_classes=1000", "data.n_classes 1000"),
            ("model.layout=\"dense\"", "sparse"),
            ("model.input_bands.cutoffs=[1000]", "bands"),
        ] {
            let err = sets(&[tied[0], tied[1], tied[2], bad])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("model.tie_output") && err.contains(says),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn every_example_config_loads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                load(Some(&path), &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 9, "{n} configs in {}", dir.display());
    }
}
