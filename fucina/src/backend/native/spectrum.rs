//! Power spectra with a real-input FFT (`realfft`), frames split over the workers.

use crate::backend::spectrum::Spectrum;
use std::sync::Mutex;

/// Frames per task.
const FRAMES_PER_TASK: usize = 16;

/// [`crate::backend::spectrum::power_spectrum_spec`] by FFT in `f32`: the same squared
/// magnitudes to the rounding of an `O(N log N)` transform.
pub fn power_spectrum(p: &Spectrum, x: &[f32], out: &mut [f32]) {
    let plan = realfft::RealFftPlanner::<f32>::new().plan_fft_forward(p.n_fft);
    let bins = p.bins();
    let chunks: Vec<Mutex<(&[f32], &mut [f32])>> =
        x.chunks(FRAMES_PER_TASK * p.n_fft).zip(out.chunks_mut(FRAMES_PER_TASK * bins)).map(Mutex::new).collect();
    let task = |c: usize| {
        // Each task locks only its own chunk: never contended.
        let mut slot = chunks[c].lock().unwrap_or_else(|e| e.into_inner());
        let (xs, os) = &mut *slot;
        let mut input = plan.make_input_vec();
        let mut spectrum = plan.make_output_vec();
        let mut scratch = plan.make_scratch_vec();
        for (frame, o) in xs.chunks_exact(p.n_fft).zip(os.chunks_exact_mut(bins)) {
            input.copy_from_slice(frame);
            // The lengths are the plan's own (its input, output and scratch vectors), which is
            // the only way this call fails.
            if plan.process_with_scratch(&mut input, &mut spectrum, &mut scratch).is_err() {
                o.fill(f32::NAN);
                continue;
            }
            for (v, c) in o.iter_mut().zip(&spectrum) {
                *v = c.re * c.re + c.im * c.im;
            }
        }
    };
    if super::par(p.frames * p.n_fft * 8) && chunks.len() > 1 {
        super::team::for_each(chunks.len(), task);
    } else {
        (0..chunks.len()).for_each(task);
    }
}
