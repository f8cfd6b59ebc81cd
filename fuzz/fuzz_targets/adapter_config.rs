//! A PEFT `adapter_config.json` as `convert-lora` reads it: any text is
//! taken or refused by name, and a taken one answers a rank for any module
//! name — never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::convert::AdapterConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = AdapterConfig::parse(std::path::Path::new("adapter_config.json"), text) else { return };
    for module in ["model.layers.0.self_attn.q_proj", "q_proj", "", text] {
        assert!(config.rank_of(module) > 0);
    }
});
