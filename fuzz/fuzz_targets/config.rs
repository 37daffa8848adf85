//! Config files: arbitrary text as a TOML config over the defaults, deserialised and
//! range-checked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_config::ConfigLoader;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(loader) = ConfigLoader::new().text(std::path::Path::new("fuzz.toml"), text) {
            let _ = loader.build();
        }
    }
});
