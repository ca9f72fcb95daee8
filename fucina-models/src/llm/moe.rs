//! Mixture-of-experts plumbing shared by the MoE models: routing (softmax as Qwen3-MoE and
//! DeepSeek-V2, biased sigmoid with group limits as DeepSeek-V3 and GLM-4.5), choosing the top
//! experts, and running each expert on the rows routed to it with the weighted sum back in
//! place.

use fucina::prelude::*;

/// Indices of the `k` largest values, largest first (ties: the lower index first).
pub fn top_k(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// How router logits become expert scores (llama.cpp's `expert_gating_func`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over experts (Qwen3-MoE, DeepSeek-V2).
    Softmax,
    /// Independent sigmoids, chosen with a per-expert bias (DeepSeek-V3, GLM-4.5).
    Sigmoid,
}

/// How a token picks its experts and weighs them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    /// Experts each token is routed to.
    pub used: usize,
    /// Score function.
    pub gating: Gating,
    /// Expert groups (1: no group limit).
    pub groups: usize,
    /// Groups a token may use.
    pub groups_used: usize,
    /// Renormalize the chosen weights to sum to 1 before scaling.
    pub norm_topk: bool,
    /// Factor on the chosen weights (`routed_scaling_factor`).
    pub scale: f32,
}

impl Routing {
    /// Checks that `experts` experts can be routed this way: `0 < used <= experts`, the
    /// experts split evenly into the groups, the groups a token may use hold at least
    /// `used` experts, a positive finite scale. The error names the problem.
    pub fn check(&self, experts: usize) -> Result<(), String> {
        if self.used == 0 || self.used > experts {
            return Err(format!("routing to {} of {experts} experts: need 0 < used <= experts", self.used));
        }
        if self.groups == 0 || !experts.is_multiple_of(self.groups) || self.groups_used > self.groups {
            return Err(format!("{experts} experts in {} groups, {} used", self.groups, self.groups_used));
        }
        if self.groups_used * (experts / self.groups) < self.used {
            return Err(format!(
                "{} groups of {} experts cannot supply {} experts",
                self.groups_used,
                experts / self.groups,
                self.used
            ));
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(format!("expert weights scale {}", self.scale));
        }
        Ok(())
    }
}

/// The experts of one token (`logits`: its router row) and their weights: softmax or sigmoid
/// scores, plus the selection `bias` for choosing only (DeepSeek-V3's
/// `e_score_correction_bias`), limited to the best `groups_used` groups (softmax: a group's
/// best score; sigmoid: the sum of its two best biased scores), top `used`, optionally
/// renormalized, times `scale`.
///
/// ```
/// use fucina_models::llm::moe::{route, Gating, Routing};
/// let r = Routing { used: 2, gating: Gating::Softmax, groups: 1, groups_used: 1, norm_topk: true, scale: 1.0 };
/// let (ids, w) = route(&r, None, &[0.0, 2.0, 1.0, -1.0]);
/// assert_eq!(ids, [1, 2]);
/// assert!((w[0] + w[1] - 1.0).abs() < 1e-6 && w[0] > w[1]);
/// ```
pub fn route(r: &Routing, bias: Option<&[f32]>, logits: &[f32]) -> (Vec<usize>, Vec<f32>) {
    let n = logits.len();
    let scores: Vec<f32> = match r.gating {
        Gating::Softmax => {
            let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = logits.iter().map(|v| (v - m).exp()).collect();
            let z: f32 = e.iter().sum();
            e.iter().map(|v| v / z).collect()
        }
        Gating::Sigmoid => logits.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
    };
    let mut choice: Vec<f32> = match bias {
        Some(b) => scores.iter().zip(b).map(|(s, b)| s + b).collect(),
        None => scores.clone(),
    };
    if r.groups > 1 && r.groups_used < r.groups {
        let per = n / r.groups;
        let group_score: Vec<f32> = (0..r.groups)
            .map(|g| {
                let mut v: Vec<f32> = choice[g * per..(g + 1) * per].to_vec();
                v.sort_by(|a, b| b.total_cmp(a));
                match r.gating {
                    Gating::Softmax => v[0],
                    Gating::Sigmoid => v.iter().take(2).sum(),
                }
            })
            .collect();
        let keep = top_k(&group_score, r.groups_used);
        for g in 0..r.groups {
            if !keep.contains(&g) {
                let masked = match r.gating {
                    Gating::Softmax => 0.0,
                    Gating::Sigmoid => f32::NEG_INFINITY,
                };
                choice[g * per..(g + 1) * per].fill(masked);
            }
        }
    }
    let ids = top_k(&choice, r.used);
    let mut w: Vec<f32> = ids.iter().map(|&e| scores[e]).collect();
    if r.norm_topk {
        let z: f32 = w.iter().sum::<f32>() + 1e-20;
        w.iter_mut().for_each(|v| *v /= z);
    }
    w.iter_mut().for_each(|v| *v *= r.scale);
    (ids, w)
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

/// Experts with at most this many rows each run side by side, one per worker, or as one
/// group of products ([`few_rows`]), when a layer has several: each product is too small to
/// be worth splitting over the pool on its own.
const SIDE_BY_SIDE_ROWS: usize = 8;

/// Whether every expert with rows has at most a few (decode, short prompts): the experts of
/// such a layer are best run together, as one group, instead of one after another.
pub fn few_rows(assigned: &Assignment) -> bool {
    assigned.iter().all(|(rows, _)| rows.len() <= SIDE_BY_SIDE_ROWS)
}

/// The experts with rows (ascending ids) and each one's rows of the input.
pub type Gathered = (Vec<usize>, Vec<Tensor<axes![seq, hidden]>>);

/// The experts with rows (ascending ids) and, for each, its rows of `x` gathered (they stay
/// `seq` rows, a subset of the positions).
pub fn gather(x: &Tensor<axes![seq, hidden]>, assigned: &Assignment) -> Result<Gathered> {
    let active = active(assigned);
    let xs = active.iter().map(|&e| gather_one(x, &assigned[e].0)).collect::<Result<_>>()?;
    Ok((active, xs))
}

/// The experts with rows, ascending.
fn active(assigned: &Assignment) -> Vec<usize> {
    (0..assigned.len()).filter(|&e| !assigned[e].0.is_empty()).collect()
}

/// Rows `rows` of `x`.
fn gather_one(x: &Tensor<axes![seq, hidden]>, rows: &[u32]) -> Result<Tensor<axes![seq, hidden]>> {
    let ids = Tensor::<axes![seq]>::from_vec(rows.to_vec(), &[rows.len()])?;
    x.embedding(&ids)
}

/// Adds each active expert's output (`outs[i]`: expert `active[i]`'s rows, in the order they
/// were gathered), times its weight, into the rows of `y` (`[seq, h]`, row-major) it came
/// from, expert after expert in `active` order.
pub fn scatter_add(y: &mut [f32], h: usize, assigned: &Assignment, active: &[usize], outs: &[Vec<f32>]) {
    for (&e, ye) in active.iter().zip(outs) {
        let (rows, weights) = &assigned[e];
        for ((&t, &w), out) in rows.iter().zip(weights).zip(ye.chunks_exact(h)) {
            for (acc, v) in y[t as usize * h..(t as usize + 1) * h].iter_mut().zip(out) {
                *acc += w * v;
            }
        }
    }
}

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
    let active = active(assigned);
    let one = |e: usize| -> Result<Vec<f32>> { Ok(run(e, &gather_one(x, &assigned[e].0)?)?.to_f32_vec()) };
    let ctx = ExecContext::current();
    let outs: Vec<Vec<f32>> = if few_rows(assigned) {
        ctx.map_side_by_side(&active, |&e| one(e))?
    } else {
        active.iter().map(|&e| one(e)).collect::<Result<_>>()?
    };
    scatter_add(y, h, assigned, &active, &outs);
    Ok(())
}
