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
