//! The demo's three models, built with `tch::nn` in a `VarStore` of their own.
use tch::nn::{self, Module};
use tch::Tensor;

/// Which model, and the shape of one input sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mlp,
    Cnn,
    Transformer,
}

pub const ALL: [Kind; 3] = [Kind::Mlp, Kind::Cnn, Kind::Transformer];
const D: i64 = 64;

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mlp => "mlp",
            Kind::Cnn => "cnn",
            Kind::Transformer => "transformer",
        }
    }

    /// A batch of `batch` inputs for this model.
    pub fn input(self, batch: i64, device: tch::Device) -> Tensor {
        let shape: Vec<i64> = match self {
            Kind::Mlp => vec![batch, 256],
            Kind::Cnn => vec![batch, 1, 28, 28],
            Kind::Transformer => vec![batch, 16, D],
        };
        Tensor::randn(shape.as_slice(), (tch::Kind::Float, device))
    }

    /// Builds the model's layers under `p` (fresh weights; load real ones after).
    pub fn build(self, p: &nn::Path) -> Box<dyn Module> {
        match self {
            Kind::Mlp => Box::new(
                nn::seq()
                    .add(nn::linear(p / "l1", 256, 512, Default::default()))
                    .add_fn(|x| x.relu())
                    .add(nn::linear(p / "l2", 512, 512, Default::default()))
                    .add_fn(|x| x.relu())
                    .add(nn::linear(p / "l3", 512, 10, Default::default())),
            ),
            Kind::Cnn => {
                let conv = nn::ConvConfig {
                    padding: 1,
                    ..Default::default()
                };
                Box::new(
                    nn::seq()
                        .add(nn::conv2d(p / "c1", 1, 16, 3, conv))
                        .add_fn(|x| x.relu().max_pool2d_default(2))
                        .add(nn::conv2d(p / "c2", 16, 32, 3, conv))
                        .add_fn(|x| x.relu().max_pool2d_default(2).flatten(1, -1))
                        .add(nn::linear(p / "fc", 32 * 7 * 7, 10, Default::default())),
                )
            }
            Kind::Transformer => Box::new(EncoderBlock::new(p)),
        }
    }
}

/// One transformer encoder block: self-attention, MLP, pre-layer-norm, residuals.
#[derive(Debug)]
struct EncoderBlock {
    qkv: nn::Linear,
    out: nn::Linear,
    ln1: nn::LayerNorm,
    ln2: nn::LayerNorm,
    ff1: nn::Linear,
    ff2: nn::Linear,
}

const HEADS: i64 = 4;

impl EncoderBlock {
    fn new(p: &nn::Path) -> Self {
        let c = Default::default();
        EncoderBlock {
            qkv: nn::linear(p / "qkv", D, 3 * D, c),
            out: nn::linear(p / "out", D, D, c),
            ln1: nn::layer_norm(p / "ln1", vec![D], Default::default()),
            ln2: nn::layer_norm(p / "ln2", vec![D], Default::default()),
            ff1: nn::linear(p / "ff1", D, 4 * D, c),
            ff2: nn::linear(p / "ff2", 4 * D, D, c),
        }
    }
}

impl Module for EncoderBlock {
    fn forward(&self, x: &Tensor) -> Tensor {
        let (b, t, _) = x.size3().expect("input is [batch, tokens, dim]");
        let heads = |y: Tensor| y.view([b, t, HEADS, D / HEADS]).transpose(1, 2);
        let qkv = self.qkv.forward(&self.ln1.forward(x)).chunk(3, -1);
        let (q, k, v) = (
            heads(qkv[0].shallow_clone()),
            heads(qkv[1].shallow_clone()),
            heads(qkv[2].shallow_clone()),
        );
        let scores = q.matmul(&k.transpose(-2, -1)) / ((D / HEADS) as f64).sqrt();
        let attended = scores.softmax(-1, tch::Kind::Float).matmul(&v);
        let x = x + self
            .out
            .forward(&attended.transpose(1, 2).contiguous().view([b, t, D]));
        let ff = self
            .ff2
            .forward(&self.ff1.forward(&self.ln2.forward(&x)).gelu("none"));
        x + ff
    }
}
