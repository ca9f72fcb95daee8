//! Mixture-of-experts plumbing shared by the MoE models: choosing the top experts, and
//! running each expert on the rows routed to it with the weighted sum back in place.

use fucina::prelude::*;

/// Indices of the `k` largest values, largest first (ties: the lower index first).
pub fn top_k(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// For each expert, the rows routed to it and their weights.
pub type Assignment = Vec<(Vec<u32>, Vec<f32>)>;

/// Groups per-token routing decisions (`(experts, weights)` for token 0, 1, ...) by expert,
/// and lists each token's experts in ascending order (for tracing).
pub fn assign(experts: usize, per_token: impl Iterator<Item = (Vec<usize>, Vec<f32>)>) -> (Assignment, Vec<Vec<u32>>) {
    let mut assigned: Assignment = vec![(Vec::new(), Vec::new()); experts];
    let mut chosen = Vec::new();
    for (t, (ids, weights)) in per_token.enumerate() {
        for (&e, &w) in ids.iter().zip(&weights) {
            assigned[e].0.push(t as u32);
            assigned[e].1.push(w);
        }
        let mut sorted: Vec<u32> = ids.iter().map(|&e| e as u32).collect();
        sorted.sort_unstable();
        chosen.push(sorted);
    }
    (assigned, chosen)
}

/// Experts with at most this many rows each run side by side, one per worker, when a
/// layer has several: each product is too small to be worth splitting over the pool.
const SIDE_BY_SIDE_ROWS: usize = 8;

/// Adds `sum_e weight * expert_e(x[rows of e])` into `y` (`[seq, hidden]`, row-major): each
/// expert with rows runs once, on those rows gathered (`run(e, rows)`). When every active
/// expert has few rows (decode, short prompts), the experts run in parallel, each one
/// serially on one worker, instead of each small product waking the pool; the sums are
/// added in expert order either way, so the result does not depend on the schedule.
pub fn combine(
    x: &Tensor<axes![seq, hidden]>,
    assigned: &Assignment,
    y: &mut [f32],
    run: impl Fn(usize, &Tensor<axes![seq, hidden]>) -> Result<Tensor<axes![seq, hidden]>> + Sync,
) -> Result<()> {
    let h = x.size::<hidden>();
    let active: Vec<usize> = (0..assigned.len()).filter(|&e| !assigned[e].0.is_empty()).collect();
    let one = |e: usize| -> Result<Vec<f32>> {
        // The expert's rows, gathered (they stay `seq` rows, a subset of the positions).
        let rows = &assigned[e].0;
        let ids = Tensor::<axes![seq]>::from_vec(rows.clone(), &[rows.len()])?;
        let xe: Tensor<axes![seq, hidden]> = x.embedding(&ids)?;
        Ok(run(e, &xe)?.to_f32_vec())
    };
    let ctx = ExecContext::current();
    let small = active.iter().all(|&e| assigned[e].0.len() <= SIDE_BY_SIDE_ROWS);
    let outs: Vec<Vec<f32>> = if small {
        ctx.map_side_by_side(&active, |&e| one(e))?
    } else {
        active.iter().map(|&e| one(e)).collect::<Result<_>>()?
    };
    for (&e, ye) in active.iter().zip(&outs) {
        let (rows, weights) = &assigned[e];
        for ((&t, &w), out) in rows.iter().zip(weights).zip(ye.chunks_exact(h)) {
            for (acc, v) in y[t as usize * h..(t as usize + 1) * h].iter_mut().zip(out) {
                *acc += w * v;
            }
        }
    }
    Ok(())
}
