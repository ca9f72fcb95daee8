//! The standard axis vocabulary. Declare more with `fucina::axis!(pub name)`.

crate::axis!(
    pub batch, pub seq, pub kv_seq, pub in, pub out, pub hidden, pub head, pub head_dim, pub kv_head,
    pub group, pub vocab, pub class, pub channel, pub time, pub kernel, pub ffn, pub expert,
    pub feature, pub row, pub col, pub embed, pub token, pub sample, pub gate
);
