//! `#[derive(Module)]`: dotted names, visiting, counting, safetensors round trip.

use fucina::prelude::*;
use fucina::FucinaError;

axis!(pub h1, pub q, pub kv);

#[derive(Module)]
struct Attn {
    wq: Tensor<axes![q, hidden]>,
    wk: Tensor<axes![kv, hidden]>,
}

#[derive(Module)]
struct Layer {
    attn: Attn,
    #[module(rename = "norm.weight")]
    norm: Tensor<axes![hidden]>,
    bias: Option<Tensor<axes![hidden]>>,
}

#[derive(Module)]
struct Net {
    embed: Tensor<axes![vocab, hidden]>,
    layers: Vec<Layer>,
    heads: [Tensor<axes![class, hidden]>; 2],
    #[module(skip)]
    eps: f32,
}

fn net() -> Net {
    let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() }).unwrap();
    let layer = |with_bias: bool| Layer {
        attn: Attn { wq: ctx.randn(&[4, 8], 0.0, 1.0).unwrap(), wk: ctx.randn(&[2, 8], 0.0, 1.0).unwrap() },
        norm: Tensor::ones(&[8]).unwrap(),
        bias: with_bias.then(|| Tensor::zeros(&[8]).unwrap()),
    };
    Net {
        embed: ctx.randn(&[10, 8], 0.0, 0.02).unwrap(),
        layers: vec![layer(true), layer(false)],
        heads: [ctx.randn(&[3, 8], 0.0, 1.0).unwrap(), ctx.randn(&[3, 8], 0.0, 1.0).unwrap()],
        eps: 1e-6,
    }
}

#[test]
fn lists_parameters_with_dotted_names() {
    let n = net();
    assert_eq!(
        n.param_names(),
        vec![
            "embed",
            "layers.0.attn.wq",
            "layers.0.attn.wk",
            "layers.0.norm.weight",
            "layers.0.bias",
            "layers.1.attn.wq",
            "layers.1.attn.wk",
            "layers.1.norm.weight",
            "heads.0",
            "heads.1",
        ]
    );
    assert_eq!(n.num_tensors(), 10);
    assert_eq!(n.num_params(), 80 + 2 * (32 + 16 + 8) + 8 + 2 * 24);
    assert_eq!(n.eps, 1e-6);
}

#[test]
fn mutable_visit_updates_in_place_and_keeps_shapes() {
    let mut n = net();
    n.visit_params_mut("", &mut |name, mut slot| {
        if name.ends_with("norm.weight") {
            let doubled = Tensor::<axes![hidden]>::from_raw(slot.get().clone()).unwrap().scale(2.0).unwrap();
            slot.set(doubled.into_raw()).unwrap();
            let wrong = fucina::RawTensor::from_buffer(fucina::storage::Buffer::F32(vec![0.0; 3]), &[3]).unwrap();
            assert!(slot.set(wrong).is_err());
        }
    });
    assert_eq!(n.layers[1].norm.to_f32_vec(), vec![2.0; 8]);
}

#[test]
fn safetensors_round_trip_and_errors() {
    let dir = std::env::temp_dir().join(format!("fucina-module-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("net.safetensors");
    let a = net();
    a.save_safetensors(&path).unwrap();
    let mut b = net();
    b.embed = Tensor::zeros(&[10, 8]).unwrap();
    b.load_safetensors(&path).unwrap();
    for ((na, ta), (nb, tb)) in a.named_params().iter().zip(b.named_params()) {
        assert_eq!(na, &nb);
        assert_eq!(ta.to_f32_vec(), tb.to_f32_vec(), "{na}");
    }
    let file = fucina::formats::safetensors::SafeTensors::open(&path).unwrap();
    assert_eq!(file.tensors()["layers.0.attn.wq"].shape, vec![4, 8]);

    // A module whose shapes disagree with the file gets an error naming the tensor.
    let mut c = net();
    c.embed = Tensor::zeros(&[11, 8]).unwrap();
    let err = c.load_safetensors(&path).unwrap_err();
    assert!(err.to_string().contains("`embed`"), "{err}");
    // Truncated file: a format error, not a panic.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    assert!(matches!(net().load_safetensors(&cut), Err(FucinaError::Format { .. })));
    std::fs::remove_dir_all(&dir).ok();
}

#[derive(Module)]
struct Mlp {
    up: Tensor<axes![h1, hidden]>,
}

/// Enum modules: the variant held is visited; a single unnamed field is transparent.
#[derive(Module)]
enum Ffn {
    Dense(Mlp),
    Gated {
        gate: Tensor<axes![h1, hidden]>,
        up: Tensor<axes![h1, hidden]>,
        #[module(skip)]
        _act: u8,
    },
    Pair(Tensor<axes![hidden]>, #[module(rename = "scale")] Tensor<axes![hidden]>),
    Identity,
}

#[derive(Module)]
struct Block {
    ffn: Ffn,
}

/// A generic module over axis parameters (bounded by its field types, not by `O`, `I`).
#[derive(Module)]
struct Proj<O: fucina::tensor::axes::Axis + Send + Sync, I: fucina::tensor::axes::Axis + Send + Sync> {
    w: Tensor<(O, I)>,
    b: Option<Tensor<(O,)>>,
}

#[test]
fn enums_and_generic_structs_derive_module() {
    fn t<A: fucina::tensor::axes::Axes>(s: &[usize]) -> Tensor<A> {
        Tensor::zeros(s).unwrap()
    }
    let names = |f: Ffn| Block { ffn: f }.param_names();
    assert_eq!(names(Ffn::Dense(Mlp { up: t(&[3, 2]) })), vec!["ffn.up"]);
    assert_eq!(names(Ffn::Gated { gate: t(&[3, 2]), up: t(&[3, 2]), _act: 0 }), vec!["ffn.gate", "ffn.up"]);
    assert_eq!(names(Ffn::Pair(t(&[2]), t(&[2]))), vec!["ffn.0", "ffn.scale"]);
    assert!(names(Ffn::Identity).is_empty());
    let mut b = Block { ffn: Ffn::Gated { gate: t(&[3, 2]), up: t(&[3, 2]), _act: 0 } };
    b.visit_params_mut("", &mut |n, mut p| {
        if n == "ffn.up" {
            p.set(Tensor::<axes![h1, hidden]>::ones(&[3, 2]).unwrap().into_raw()).unwrap();
        }
    });
    let Ffn::Gated { up, .. } = &b.ffn else { unreachable!() };
    assert_eq!(up.to_f32_vec(), vec![1.0; 6]);
    let p: Proj<q, hidden> = Proj { w: t(&[4, 2]), b: Some(t(&[4])) };
    assert_eq!((p.param_names(), p.num_params()), (vec!["w".to_string(), "b".to_string()], 12));
}

/// Quantized matrices in a derived module (a struct and an enum variant) are visited as
/// frozen weights, by name, beside the tensors that stay parameters; `#[module(skip)]` still
/// hides one.
#[test]
fn quantized_weights_are_frozen_weights_of_a_derived_module() {
    use fucina::nn::Module;
    use fucina::quant::{GgmlType, QWeight};
    axis!(qo, qi);
    #[derive(Module)]
    struct Head {
        w: QWeight<qo, qi>,
        bias: Tensor<axes![qo]>,
        #[module(skip)]
        spare: QWeight<qo, qi>,
    }
    #[derive(Module)]
    enum Either {
        Plain(Head),
        Stack { layers: Vec<QWeight<qo, qi>> },
    }
    let q = |rows: usize| {
        let t = Tensor::<axes![qo, qi]>::from_vec(vec![0.25f32; rows * 32], &[rows, 32]).unwrap();
        QWeight::quantize(&t, GgmlType::Q8_0).unwrap()
    };
    let head = Head { w: q(4), bias: Tensor::zeros(&[4]).unwrap(), spare: q(2) };
    assert_eq!(head.param_names(), ["bias"]);
    assert_eq!(head.spare.rows(), 2, "a skipped weight is still the struct's");
    assert_eq!(head.frozen_weights(), [("w".to_string(), "Q8_0".to_string(), 4, 32)]);
    let e = Either::Plain(head);
    assert_eq!(e.frozen_weights().len(), 1);
    let s = Either::Stack { layers: vec![q(3), q(5)] };
    let got: Vec<(String, usize)> = s.frozen_weights().into_iter().map(|(n, _, r, _)| (n, r)).collect();
    assert_eq!(got, [("layers.0".to_string(), 3), ("layers.1".to_string(), 5)]);
}

/// A whole module (tensors of three dtypes, quantized weights in a struct, a Vec and an enum
/// variant) saved as GGUF and loaded into a differently initialized one: every tensor equal,
/// every frozen weight the same format and bytes. Bad files are errors that change nothing,
/// and a failed save leaves the existing file whole.
#[test]
fn gguf_round_trip_with_frozen_weights() {
    use fucina::formats::gguf::{GgufFile, ModuleGguf};
    use fucina::quant::{GgmlType, QWeight};
    axis!(go, gi);
    #[derive(Module)]
    enum Proj {
        Quant(QWeight<go, gi>),
        Dense { w: Tensor<axes![go, gi]> },
    }
    #[derive(Module)]
    struct Model {
        norm: Tensor<axes![gi]>,
        half: Tensor<axes![go]>,
        experts: Vec<QWeight<go, gi>>,
        proj: Proj,
    }
    let w = |rows: usize, seed: f32| {
        Tensor::<axes![go, gi]>::from_vec(
            (0..rows * 256).map(|i| (i as f32 * 0.37 + seed).sin()).collect(),
            &[rows, 256],
        )
        .unwrap()
    };
    let q = |rows: usize, seed: f32, ty| QWeight::quantize(&w(rows, seed), ty).unwrap();
    let model = |seed: f32, ty| Model {
        norm: Tensor::from_vec(vec![seed; 256], &[256]).unwrap(),
        half: Tensor::<axes![go]>::from_vec(vec![seed + 0.5; 4], &[4]).unwrap().cast(DType::BF16).unwrap(),
        experts: vec![q(4, seed, ty), q(4, seed + 1.0, GgmlType::Q6_K)],
        proj: Proj::Quant(q(8, seed + 2.0, GgmlType::Q8_0)),
    };
    let dir = std::env::temp_dir().join(format!("fucina-module-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    let a = model(1.0, GgmlType::Q4_K);
    a.save_gguf(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let names: Vec<&str> = file.header().tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["norm", "half", "experts.0", "experts.1", "proj"]);
    assert_eq!(file.tensor_info("experts.0").unwrap().ty, GgmlType::Q4_K);
    assert_eq!(file.tensor_info("half").unwrap().ty, GgmlType::BF16);

    let mut b = model(-3.0, GgmlType::Q8_0);
    b.load_gguf(&path).unwrap();
    assert_eq!(b.norm.to_f32_vec(), a.norm.to_f32_vec());
    assert_eq!((b.half.dtype(), b.half.to_f32_vec()), (DType::BF16, a.half.to_f32_vec()));
    for (x, y) in b.experts.iter().zip(&a.experts) {
        assert_eq!((x.ggml_type(), x.bytes()), (y.ggml_type(), y.bytes()));
    }
    let (Proj::Quant(pb), Proj::Quant(pa)) = (&b.proj, &a.proj) else { unreachable!() };
    assert_eq!(pb.bytes(), pa.bytes());
    let x = Tensor::<axes![seq, gi]>::from_vec(vec![0.5f32; 2 * 256], &[2, 256]).unwrap();
    assert_eq!(b.experts[0].forward(&x).unwrap().to_f32_vec(), a.experts[0].forward(&x).unwrap().to_f32_vec());

    // A module whose shapes or names differ: an error naming the tensor, nothing changed.
    let mut wider = model(-3.0, GgmlType::Q8_0);
    wider.experts[1] = q(5, 0.0, GgmlType::Q8_0);
    let before = wider.experts[0].bytes().to_vec();
    let e = wider.load_gguf(&path).unwrap_err().to_string();
    assert!(e.contains("experts.1") && e.contains("[5, 256]"), "{e}");
    assert_eq!(wider.experts[0].bytes(), before, "a failed load changes nothing");
    assert_eq!(wider.norm.to_f32_vec(), vec![-3.0; 256]);
    let mut dense = model(0.0, GgmlType::Q8_0);
    dense.proj = Proj::Dense { w: w(8, 0.0) };
    let e = dense.load_gguf(&path).unwrap_err().to_string();
    assert!(e.contains("proj.w"), "{e}");

    // A truncated file is an error, not a panic.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    assert!(model(0.0, GgmlType::Q8_0).load_gguf(&cut).is_err());

    // A repacked weight cannot be saved; the file already there stays whole.
    let ctx = ExecContext::new(ExecConfig { backend: BackendKind::Native, ..ExecConfig::default() }).unwrap();
    let _g = ctx.enter();
    let packed = QWeight::<go, gi>::quantize(&w(16, 0.0), GgmlType::Q4_K).unwrap().prepared().unwrap();
    if packed.is_repacked() {
        let mut c = model(2.0, GgmlType::Q4_K);
        c.experts[0] = packed;
        let e = c.save_gguf(&path).unwrap_err().to_string();
        assert!(e.contains("experts.0") && e.contains("repacked"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the old file is untouched");
    }
    std::fs::remove_dir_all(&dir).ok();
}
