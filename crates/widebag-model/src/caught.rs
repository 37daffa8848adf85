//! Panics a caller expects and handles (a backend's initialisation, under `catch_unwind`), told
//! apart from the panics that must end the process (the binary's panic hook asks [`expected`]).

use std::cell::Cell;
use std::panic::UnwindSafe;

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, turning a panic on this thread into an `Err`; the panic hook lets it unwind.
pub fn catch<T>(f: impl FnOnce() -> T + UnwindSafe) -> std::thread::Result<T> {
    let before = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(f);
    CATCHING.with(|c| c.set(before));
    result
}

/// Whether a panic on this thread now would be caught by [`catch`].
pub fn expected() -> bool {
    CATCHING.with(Cell::get)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_panics_inside_catch_are_expected() {
        assert!(!super::expected());
        let r = super::catch(|| {
            assert!(super::expected());
            7
        });
        assert_eq!(r.ok(), Some(7));
        assert!(super::catch(|| panic!("inside")).is_err());
        assert!(!super::expected());
    }
}
