//! Process-wide set-up before any thread exists: the allocator's policy
//! ([`crate::malloc_policy`]), SIGPIPE's default disposition, a panic in any
//! thread (a backend's worker included) ending the process with exit code 1 instead of leaving it
//! hung, and a private `XDG_RUNTIME_DIR` so that Mesa's Vulkan loader prints nothing.

use std::io::Write;

/// Set by the integration tests: a spawned thread panics while the main thread waits forever.
pub const FORCED_PANIC_ENV: &str = "WIDEBAG_TEST_PANIC_IN_THREAD";

/// Runs first in `main`, while the process has one thread.
pub fn set_up() {
    crate::malloc_policy::keep_freed_memory();
    crate::host_memory::record_start();
    restore_sigpipe();
    quiet_mesa();
    // flex's tensors live on the heap: a probe can read them there (`StepProbe::on_heap`).
    widebag_model::probe::set_heap_counter(crate::heap::in_use_bytes);
    end_on_any_panic();
    if std::env::var_os(FORCED_PANIC_ENV).is_some() {
        force_a_panic_in_a_thread();
    }
}

/// A closed stdout (`widebag plan | head`) ends the process as other command-line tools do,
/// rather than as a panic in `println!`.
fn restore_sigpipe() {
    #[cfg(unix)]
    #[allow(
        unsafe_code,
        reason = "libc::signal has no safe wrapper; called once at start-up"
    )]
    // SAFETY: restoring a signal's default disposition at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A panic that no `widebag_model::caught::catch` expects prints the standard message, one line
/// of widebag's, and ends the process with exit code 1 from the panicking thread: a panicked
/// worker whose peers wait on it (burn's device threads, wgpu's) would otherwise hang the process.
/// `_exit` skips the atexit handlers, which may wait on the same locks.
fn end_on_any_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = panic_message(info);
        let refused = !widebag_model::caught::expected() && is_out_of_memory(&message);
        if refused {
            // A device that refused an allocation (wgpu's out-of-memory error reaches widebag
            // only as a panic from cubecl's error handler): said plainly, with where and what
            // the ledger predicted, instead of a backtrace from inside burn.
            let mut m = "error: the device refused an allocation during ".to_string();
            let _ = widebag_model::probe::progress::describe(&mut m);
            m.push_str(&format!(": {message}"));
            crate::heap::write_context(&mut m);
            let _ = writeln!(std::io::stderr(), "{m}\n  the run failed (exit code 1)");
        } else {
            default(info);
        }
        if widebag_model::caught::expected() {
            return;
        }
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        if !refused {
            let _ = writeln!(
                std::io::stderr(),
                "error: widebag's thread '{name}' panicked (a bug); the run failed (exit code 1)"
            );
        }
        #[allow(
            unsafe_code,
            reason = "libc::_exit has no safe wrapper; it is the exit that cannot block"
        )]
        // SAFETY: `_exit` only ends the process; nothing runs after it.
        unsafe {
            libc::_exit(1)
        }
    }));
}

/// The text a panic carries.
fn panic_message(info: &std::panic::PanicHookInfo<'_>) -> String {
    let p = info.payload();
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Whether a panic's text is a backend's out-of-memory error (wgpu's `Out of Memory`, cubecl's
/// `OutOfMemory`, a Vulkan `ERROR_OUT_OF_DEVICE_MEMORY`).
fn is_out_of_memory(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "out of memory",
        "outofmemory",
        "out_of_device_memory",
        "out_of_host_memory",
    ]
    .iter()
    .any(|k| m.contains(k))
}

/// Mesa's loader prints "XDG_RUNTIME_DIR is invalid or not set" once per Vulkan instance when the
/// variable is missing (containers, CI, ssh sessions). A private directory, mode 0700, silences it.
fn quiet_mesa() {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir()) {
            return;
        }
        #[allow(unsafe_code, reason = "libc::getuid has no safe wrapper")]
        // SAFETY: getuid cannot fail and touches no memory.
        let uid = unsafe { libc::getuid() };
        let dir = std::env::temp_dir().join(format!("widebag-runtime-{uid}"));
        let _ = std::fs::create_dir(&dir);
        let ours = std::fs::metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if !ours || std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).is_err()
        {
            return;
        }
        #[allow(unsafe_code, reason = "set_var is unsafe once threads exist")]
        // SAFETY: called from `set_up`, first in `main`, before any other thread exists.
        unsafe {
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
    }
}

/// What the no-hang test runs: a thread panics, the main thread would wait forever.
fn force_a_panic_in_a_thread() -> ! {
    std::thread::Builder::new()
        .name("forced-panic".into())
        .spawn(|| panic!("forced by {FORCED_PANIC_ENV}"))
        .expect("spawning a thread");
    loop {
        std::thread::park();
    }
}
