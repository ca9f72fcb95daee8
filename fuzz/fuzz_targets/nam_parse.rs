//! Fuzzes the `.nam` parser and, for what parses (and is small), building the model and
//! running a few samples through the whole-signal and the streaming paths.
#![no_main]

use fucina::formats::nam::{Architecture, NamFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = NamFile::parse(data) {
        let small = match &f.architecture {
            Architecture::WaveNet(c) => f.weights.len() <= 50_000 && c.receptive_field() <= 1 << 14,
            Architecture::Lstm(c) => c.hidden_size <= 64,
        };
        if small {
            if let Ok(amp) = fucina_models::nam::Amp::from_file(&f) {
                let x = [0.1f32, -0.5, 0.9, 0.0, 0.3];
                let block = amp.process_block(&x).expect("a parsed model runs");
                let mut s = amp.stream(3);
                let mut y = [0.0f32; 5];
                s.process(&x, &mut y);
                assert_eq!(block.len(), 5);
            }
        }
    }
});
