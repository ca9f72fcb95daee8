//! One forward pass over several sequences: the rows of every sequence go through each
//! weight matrix together (one read of the weights for the whole batch), attention runs per
//! sequence over its own cache. A sequence may bring one token (decode), a few (verifying
//! drafts) or a chunk of its prompt (prefill), so decode steps and prefills share a pass.

use super::kv_cache::KvCache;
use super::rope::{Rope, Tables};
use fucina::prelude::*;
use fucina::tensor::axes::{Axes, HasAxes};

/// Which logits rows a sequence of a batch gets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// None: a chunk of a prompt whose end is still to come (the head is skipped).
    None,
    /// The last position's (the next token).
    Last,
    /// Every position's (verifying drafted tokens).
    All,
}

impl LogitRows {
    /// How many rows a sequence of `len` tokens gets.
    pub fn count(self, len: usize) -> usize {
        match self {
            LogitRows::None => 0,
            LogitRows::Last => 1,
            LogitRows::All => len,
        }
    }
}

/// One sequence's part of a batched forward pass: its new tokens and its cache.
#[derive(Debug)]
pub struct Segment<'a> {
    /// The tokens after the cache's positions (at least one).
    pub tokens: &'a [u32],
    /// The sequence's cache; the tokens' keys and values are appended.
    pub cache: &'a mut KvCache,
    /// The logits rows wanted.
    pub rows: LogitRows,
}

/// Where each segment's rows sit in the batch: `(first row, rows)`, checked (every segment
/// has tokens and room in its cache) before anything runs.
pub fn spans(batch: &[Segment<'_>], op: &'static str) -> Result<Vec<(usize, usize)>> {
    if batch.is_empty() {
        return Err(FucinaError::InvalidArgument { op, msg: "an empty batch".into() });
    }
    let mut at = 0usize;
    let mut out = Vec::with_capacity(batch.len());
    for (i, s) in batch.iter().enumerate() {
        if s.tokens.is_empty() {
            return Err(FucinaError::InvalidArgument { op, msg: format!("sequence {i} of the batch has no tokens") });
        }
        s.cache.check_room(s.tokens.len())?;
        out.push((at, s.tokens.len()));
        at =
            at.checked_add(s.tokens.len()).ok_or(FucinaError::InvalidArgument { op, msg: "too many tokens".into() })?;
    }
    Ok(out)
}

/// Every segment's tokens, in order.
pub fn tokens(batch: &[Segment<'_>]) -> Vec<u32> {
    batch.iter().flat_map(|s| s.tokens.iter().copied()).collect()
}

/// The rotary tables of every row: each segment's positions follow its own cache.
pub fn rope_tables(rope: &Rope, batch: &[Segment<'_>], mscale: f32) -> Result<Tables> {
    if let [one] = batch {
        return rope.tables(one.cache.len(), one.tokens.len(), mscale);
    }
    let parts = batch.iter().map(|s| rope.tables(s.cache.len(), s.tokens.len(), mscale)).collect::<Result<Vec<_>>>()?;
    let cos: Vec<_> = parts.iter().map(|p| &p.0).collect();
    let sin: Vec<_> = parts.iter().map(|p| &p.1).collect();
    Ok((Tensor::concat::<seq>(&cos)?, Tensor::concat::<seq>(&sin)?))
}

/// Runs `f` on each segment's rows of `x` (a view), with the segment's span (`(first row,
/// rows)`, to cut its rows out of other tensors) and its cache, and joins the results in
/// order. The rows' keys and values go into the caches inside `f`, so each sequence attends
/// only to its own positions.
pub fn per_segment<A, B>(
    x: &Tensor<A>,
    spans: &[(usize, usize)],
    batch: &mut [Segment<'_>],
    mut f: impl FnMut(&Tensor<A>, (usize, usize), &mut KvCache) -> Result<Tensor<B>>,
) -> Result<Tensor<B>>
where
    A: Axes + HasAxes<seq>,
    B: Axes + HasAxes<seq>,
{
    if let ([one], [span]) = (&mut *batch, spans) {
        return f(x, *span, one.cache);
    }
    let mut outs = Vec::with_capacity(batch.len());
    for (s, &(at, n)) in batch.iter_mut().zip(spans) {
        outs.push(f(&x.narrow::<seq>(at, n)?, (at, n), s.cache)?);
    }
    Tensor::concat::<seq>(&outs.iter().collect::<Vec<_>>())
}

/// The rows of `x` the head needs (per segment: none, the last, or all), in order.
pub fn head_rows(
    x: Tensor<axes![seq, hidden]>,
    spans: &[(usize, usize)],
    batch: &[Segment<'_>],
) -> Result<Tensor<axes![seq, hidden]>> {
    let total = x.size::<seq>();
    if batch.iter().all(|s| s.rows == LogitRows::All) {
        return Ok(x);
    }
    if let [one] = batch {
        if one.rows == LogitRows::Last && total == 1 {
            return Ok(x);
        }
    }
    let mut parts = Vec::with_capacity(batch.len());
    for (s, &(at, n)) in batch.iter().zip(spans) {
        match s.rows {
            LogitRows::None => {}
            LogitRows::Last => parts.push(x.narrow::<seq>(at + n - 1, 1)?),
            LogitRows::All => parts.push(x.narrow::<seq>(at, n)?),
        }
    }
    if parts.is_empty() {
        return x.narrow::<seq>(0, 0);
    }
    Tensor::concat::<seq>(&parts.iter().collect::<Vec<_>>())
}

/// Runs one sequence through `forward` (a model's batched pass) as a batch of one,
/// returning the logits `rows` asks for.
pub fn single(
    tokens: &[u32],
    cache: &mut KvCache,
    rows: LogitRows,
    forward: impl FnOnce(&mut [Segment<'_>]) -> Result<Vec<Tensor<axes![seq, vocab]>>>,
) -> Result<Tensor<axes![seq, vocab]>> {
    let mut out = forward(&mut [Segment { tokens, cache, rows }])?;
    out.pop().ok_or(FucinaError::InvalidArgument { op: "forward", msg: "no logits".into() })
}

/// The head's logits for the rows the segments want (`None` when none wants any):
/// `head` maps the selected hidden rows to logits.
pub fn logits(
    x: Tensor<axes![seq, hidden]>,
    spans: &[(usize, usize)],
    batch: &[Segment<'_>],
    head: impl FnOnce(Tensor<axes![seq, hidden]>) -> Result<Tensor<axes![seq, vocab]>>,
) -> Result<Option<Tensor<axes![seq, vocab]>>> {
    if batch.iter().all(|s| s.rows == LogitRows::None) {
        return Ok(None);
    }
    head(head_rows(x, spans, batch)?).map(Some)
}

/// Commits every segment's new positions and splits the head's logits into one tensor per
/// segment (`[0, vocab]` for [`LogitRows::None`]).
pub fn finish(
    batch: &mut [Segment<'_>],
    logits: Option<Tensor<axes![seq, vocab]>>,
    vocab: usize,
) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
    for s in batch.iter_mut() {
        s.cache.advance(s.tokens.len())?;
    }
    let counts: Vec<usize> = batch.iter().map(|s| s.rows.count(s.tokens.len())).collect();
    let Some(logits) = logits else {
        return batch.iter().map(|_| Tensor::from_vec(Vec::<f32>::new(), &[0, vocab])).collect();
    };
    if let [_] = batch {
        return Ok(vec![logits]);
    }
    logits.split::<seq>(&counts)
}
