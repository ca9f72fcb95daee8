//! Fuzzes the GGUF parser, the re-emit of whatever parses, and decoding of every tensor.
#![no_main]

use fucina::formats::gguf::{parse, tensor_bytes, write_gguf};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = parse(data) {
        for t in &h.tensors {
            if let Ok(bytes) = tensor_bytes(data, &h, t) {
                if t.numel() <= 1 << 16 {
                    let _ = fucina::quant::dequantize(t.ty, bytes, t.numel() as usize);
                }
            }
        }
        if let Ok(out) = write_gguf(&h, |i| tensor_bytes(data, &h, &h.tensors[i])) {
            // Whatever parses must parse again after a re-emit, and re-emit to the same bytes
            // (compared as bytes: a NaN float in the metadata is not equal to itself).
            let again = parse(&out).expect("a re-emitted file must parse");
            let twice = write_gguf(&again, |i| tensor_bytes(&out, &again, &again.tensors[i])).expect("re-emit twice");
            assert!(twice == out, "re-emit is not a fixpoint");
        }
    }
});
