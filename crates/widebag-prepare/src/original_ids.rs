//! The frequency renumbering read backwards: the original id of each new id, for what is read
//! out in the data's own numbering (`predict`'s classes and seen items, `export`'s class order).

use widebag_data::Renumbering;

/// The original id of each of the `n` new ids: the inverse of `renumbering` (`Prepared.relabel`'s
/// `ids` or `classes`), the identity where there is none.
pub fn original_ids(renumbering: Option<&Renumbering>, n: usize) -> Vec<u32> {
    let mut old_of_new: Vec<u32> = (0..n as u32).collect();
    if let Some(r) = renumbering {
        for old in 0..n as u32 {
            old_of_new[r.map(old) as usize] = old;
        }
    }
    old_of_new
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_new_id_gives_back_its_original_id() {
        let r = Renumbering::by_frequency(&[1.0, 5.0, 0.0, 5.0, 2.0]);
        // New ids [3, 0, 4, 1, 2] of old ids 0..5, read backwards.
        assert_eq!(original_ids(Some(&r), r.len()), vec![1, 3, 4, 0, 2]);
        assert_eq!(original_ids(None, 3), vec![0, 1, 2]);
    }
}
