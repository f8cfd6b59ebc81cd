//! A `tokenizer.json` as `convert` encodes its pre-tokenizer check text,
//! under each tokenizer class whose edits it makes (the first byte picks the
//! class and flags): any bytes hash or give an error, never a panic out of
//! `check_hash_of`. A panic inside the tokenizers library, which
//! `check_hash_of` turns into an error, is let be (the hook that would abort
//! on it is silenced); one that escapes still aborts the run.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::convert::check_hash_of;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let Some((&pick, tokenizer_json)) = data.split_first() else { return };
    let tokenizer_config = match pick % 6 {
        0 => json!({}),
        1 => json!({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "a", "add_eos_token": true, "eos_token": "b"}),
        2 => json!({"tokenizer_class": "GPTNeoXTokenizer", "add_bos_token": true}),
        3 => json!({"tokenizer_class": "BertTokenizer", "do_lower_case": false, "strip_accents": true}),
        4 => json!({"add_prefix_space": true}),
        _ => json!({"tokenizer_class": "LlamaTokenizer", "add_prefix_space": false}),
    };
    let config = json!({"model_type": if pick & 0x80 == 0 { "gemma" } else { "qwen2" }});
    let _ = check_hash_of(tokenizer_json, &tokenizer_config, &Value::Null, &config);
});
