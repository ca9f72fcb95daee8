//! Fuzzes the safetensors header parser and the tensor loads it allows.
#![no_main]

use fucina::formats::safetensors::parse_header;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((start, tensors, _meta)) = parse_header(data) {
        for t in tensors.values() {
            let bytes = &data[start + t.start..start + t.end];
            if let Some(d) = t.dtype.to_dtype() {
                let _ = fucina::storage::Buffer::from_le_bytes(d, bytes);
            }
        }
    }
});
