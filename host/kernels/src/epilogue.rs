//! The epilogue of TensorFlow's fused products, `_FusedMatMul` ([`super::matmul`])
//! and `_FusedConv2D` ([`super::conv`]): what happens to every output element
//! after the product, per channel (the output's last dimension) and then
//! through one activation.
//!
//! A node's `fused_ops` attribute names the steps; [`FusedOps::parse`]
//! accepts these, and refuses every other list when the kernel is built:
//!
//! | `fused_ops` | extra inputs (`args`) | `_FusedMatMul` | `_FusedConv2D` |
//! | --- | --- | --- | --- |
//! | `[BiasAdd]`, `[BiasAdd, A]` | `bias` | yes | yes |
//! | `[FusedBatchNorm]`, `[FusedBatchNorm, A]` | `scale, offset, mean, variance` | no | yes |
//!
//! where `A` is one of `Relu`, `Relu6`, `Elu`, `LeakyRelu` (the node's
//! `leakyrelu_alpha`), `Tanh`, `Sigmoid` ([`Activation`]). TensorFlow's CPU
//! kernels implement the same lists, except that its `_FusedConv2D` refuses
//! `Tanh` and `Sigmoid`; its `[BiasAdd]` with four arguments (a side input
//! and two scales) is for int8 on GPUs, and not implemented here.
//!
//! Values are TensorFlow's, step by step: `BiasAdd` is `x + bias[c]`, the
//! batch norm (inference: mean and variance given) is `(x - mean[c]) ·
//! scale[c] / √(variance[c] + ε) + offset[c]`, and the activations are
//! computed by the same element functions as the unfused kernels
//! ([`super::unary`]), so a fused node gives what the unfused `BiasAdd` and
//! activation give on the product, bit for bit.
//!
//! The kernels finish each block of the output right after its product,
//! while it is still in cache ([`Epilogue::apply`] takes any run of
//! consecutive elements); where the product runs whole on the pool they
//! make one pass over the output afterwards ([`Epilogue::apply_all`]).

use super::binary::fill_chunked;
use super::shape::ShapeDisplay;
use super::tensor::Tensor;
use super::unary::{elu, leaky_relu, relu, relu6};
use super::vmath::{in_wide_lanes, sigmoid_f32, tanh_f32};
use super::Attrs;
use crate::error::code::UNIMPLEMENTED;
use crate::error::Error;

/// The activation that ends a fused op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// No activation (`fused_ops` ends at the channel step).
    Identity,
    Relu,
    Relu6,
    Elu,
    /// `x > 0 ? x : alpha·x`, alpha from `leakyrelu_alpha`.
    LeakyRelu(f32),
    Tanh,
    Sigmoid,
}

impl Activation {
    fn from_name(name: &str, alpha: f32) -> Option<Self> {
        Some(match name {
            "Relu" => Activation::Relu,
            "Relu6" => Activation::Relu6,
            "Elu" => Activation::Elu,
            "LeakyRelu" => Activation::LeakyRelu(alpha),
            "Tanh" => Activation::Tanh,
            "Sigmoid" => Activation::Sigmoid,
            _ => return None,
        })
    }
}

/// The step applied per channel, before the activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChannelStep {
    /// `x + bias[c]`; one extra input.
    BiasAdd,
    /// `(x - mean[c]) · scale[c] / √(variance[c] + epsilon) + offset[c]`;
    /// four extra inputs (scale, offset, mean, variance).
    BatchNorm { epsilon: f32 },
}

/// Which fused product an epilogue ends: they accept different lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedProduct {
    MatMul,
    Conv2D,
}

impl FusedProduct {
    /// The TensorFlow op name.
    pub const fn op(self) -> &'static str {
        match self {
            FusedProduct::MatMul => "_FusedMatMul",
            FusedProduct::Conv2D => "_FusedConv2D",
        }
    }
}

/// A node's `fused_ops`, checked: one channel step, then an activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedOps {
    pub channel: ChannelStep,
    pub activation: Activation,
}

impl FusedOps {
    /// Reads `fused_ops`, `num_args`, `epsilon` and `leakyrelu_alpha` (both
    /// with TensorFlow's defaults when absent) and checks them ([`Self::parse`]).
    pub fn from_attrs(product: FusedProduct, attrs: &dyn Attrs) -> Result<Self, Error> {
        let float = |name: &str, default: f32| if attrs.has(name) { attrs.float(name) } else { Ok(default) };
        let fused_ops = attrs.strings("fused_ops")?;
        let num_args = attrs.int("num_args")?;
        FusedOps::parse(product, &fused_ops, num_args, float("epsilon", 1e-4)?, float("leakyrelu_alpha", 0.2)?)
    }

    /// The combination `fused_ops` names, if this device implements it for
    /// `product` with `num_args` extra inputs. An empty list and a wrong
    /// argument count are `InvalidArgument` (as on TensorFlow's CPU); any
    /// other list is `Unimplemented`, naming the list and what is
    /// implemented.
    pub fn parse(
        product: FusedProduct,
        fused_ops: &[impl AsRef<str>],
        num_args: i64,
        epsilon: f32,
        leakyrelu_alpha: f32,
    ) -> Result<Self, Error> {
        let op = product.op();
        let names: Vec<&str> = fused_ops.iter().map(AsRef::as_ref).collect();
        let (first, rest) = match names.split_first() {
            Some(split) => split,
            None => return Err(Error::InvalidArgument(format!("{op}: must have at least one fused op"))),
        };
        let channel = match *first {
            "BiasAdd" => Some(ChannelStep::BiasAdd),
            "FusedBatchNorm" if product == FusedProduct::Conv2D => Some(ChannelStep::BatchNorm { epsilon }),
            _ => None,
        };
        let activation = match rest {
            [] => Some(Activation::Identity),
            [name] => Activation::from_name(name, leakyrelu_alpha),
            _ => None,
        };
        let (Some(channel), Some(activation)) = (channel, activation) else {
            let channels = if product == FusedProduct::Conv2D { "[BiasAdd] or [FusedBatchNorm]" } else { "[BiasAdd]" };
            return Err(Error::Tensorflow {
                code: UNIMPLEMENTED,
                message: format!(
                    "tfwasm: {op}: fusion [{}] is not implemented on the WASM device: it implements {channels}, \
                     optionally followed by one of Relu, Relu6, Elu, LeakyRelu, Tanh, Sigmoid",
                    names.join(",")
                ),
            });
        };
        let fused = FusedOps { channel, activation };
        if num_args != fused.num_args() as i64 {
            let wanted = match channel {
                ChannelStep::BiasAdd => "one extra argument: bias",
                ChannelStep::BatchNorm { .. } => "four extra arguments: scale, offset, mean, variance",
            };
            return Err(Error::InvalidArgument(format!(
                "{op}: fusion [{}] must have {wanted}; num_args is {num_args}",
                names.join(",")
            )));
        }
        Ok(fused)
    }

    /// How many extra inputs (`args`) the node has.
    pub fn num_args(&self) -> usize {
        match self.channel {
            ChannelStep::BiasAdd => 1,
            ChannelStep::BatchNorm { .. } => 4,
        }
    }

    /// The epilogue for one execution whose output has `channels` channels,
    /// from the node's extra inputs (`args`, [`Self::num_args`] of them):
    /// each must be a vector of `channels` float32 values.
    pub fn epilogue<'a>(&self, op: &str, args: &'a [Tensor], channels: usize) -> Result<Epilogue<'a>, Error> {
        let vector = |index: usize, what: &str| -> Result<&'a [f32], Error> {
            let tensor = args.get(index).ok_or_else(|| {
                Error::Internal(format!("{op}: expected {} extra inputs, got {}", self.num_args(), args.len()))
            })?;
            if tensor.rank() != 1 || tensor.len() != channels {
                return Err(Error::InvalidArgument(format!(
                    "{op}: {what} must be a vector of {channels} values (the output's channels), got shape {}",
                    ShapeDisplay(tensor.shape())
                )));
            }
            tensor.data()
        };
        let channel = match self.channel {
            ChannelStep::BiasAdd => Channel::Bias(vector(0, "bias")?),
            ChannelStep::BatchNorm { epsilon } => {
                let (scale, offset) = (vector(0, "scale")?, vector(1, "offset")?);
                let (mean, variance) = (vector(2, "mean")?, vector(3, "variance")?);
                let factor = scale.iter().zip(variance).map(|(&s, &v)| s / (v + epsilon).sqrt()).collect();
                Channel::BatchNorm { mean, factor, offset }
            }
        };
        Ok(Epilogue { channel, activation: self.activation, channels })
    }
}

/// The per-channel values of one execution.
#[derive(Debug)]
enum Channel<'a> {
    Bias(&'a [f32]),
    BatchNorm { mean: &'a [f32], factor: Vec<f32>, offset: &'a [f32] },
}

/// A [`FusedOps`] ready for one execution: its per-channel values read.
#[derive(Debug)]
pub struct Epilogue<'a> {
    channel: Channel<'a>,
    activation: Activation,
    channels: usize,
}

impl Epilogue<'_> {
    /// Finishes `values` in place: consecutive elements of a row-major
    /// output with [`channels`](Self::channels) per row, the first of them
    /// at channel `first` (a block of whole rows has `first == 0`; a block
    /// of columns is finished a row segment at a time).
    pub fn apply(&self, values: &mut [f32], first: usize) {
        match self.activation {
            Activation::Identity => self.each(values, first, |v| v),
            Activation::Relu => self.each(values, first, relu),
            Activation::Relu6 => self.each(values, first, relu6),
            Activation::Elu => self.each(values, first, elu),
            Activation::LeakyRelu(alpha) => self.each(values, first, move |v| leaky_relu(v, alpha)),
            Activation::Tanh => self.each(values, first, tanh_f32),
            Activation::Sigmoid => self.each(values, first, sigmoid_f32),
        }
    }

    /// [`Self::apply`] to a whole output, shared with the compute pool when
    /// it is large.
    pub fn apply_all(&self, out: &mut [f32]) {
        let channels = self.channels.max(1);
        fill_chunked(out, |start, chunk| self.apply(chunk, start % channels));
    }

    /// Channels per output row.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// One loop per activation, so the compiler vectorises each.
    #[inline(always)]
    fn each<F: Fn(f32) -> f32 + Copy>(&self, values: &mut [f32], first: usize, activation: F) {
        let channels = self.channels;
        if values.is_empty() || channels == 0 {
            return;
        }
        in_wide_lanes(
            #[inline(always)]
            || {
                // The rest of the first row, then whole rows (the last may be
                // cut short): every piece starts at a known channel.
                let head = (channels - first % channels).min(values.len());
                let (start, rest) = values.split_at_mut(head);
                let at = first % channels;
                self.finish(start, at..at + head, activation);
                for row in rest.chunks_mut(channels) {
                    self.finish(row, 0..row.len(), activation);
                }
            },
        )
    }

    /// Finishes `values`, which hold channels `range` of one row.
    #[inline(always)]
    fn finish<F: Fn(f32) -> f32>(&self, values: &mut [f32], range: std::ops::Range<usize>, activation: F) {
        match &self.channel {
            Channel::Bias(bias) => {
                for (v, &b) in values.iter_mut().zip(&bias[range]) {
                    *v = activation(*v + b);
                }
            }
            Channel::BatchNorm { mean, factor, offset } => {
                let (mean, factor, offset) = (&mean[range.clone()], &factor[range.clone()], &offset[range]);
                for (((v, &m), &f), &o) in values.iter_mut().zip(mean).zip(factor).zip(offset) {
                    *v = activation((*v - m) * f + o);
                }
            }
        }
    }
}

/// A node's attributes from values set in a test, of every kind the fused
/// products read.
#[cfg(test)]
#[derive(Debug, Default, Clone)]
pub(crate) struct NodeAttrs(std::collections::HashMap<&'static str, AttrValue>);

#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    String(String),
    Strings(Vec<String>),
}

#[cfg(test)]
impl NodeAttrs {
    pub(crate) fn with(mut self, name: &'static str, value: AttrValue) -> Self {
        self.0.insert(name, value);
        self
    }

    /// `fused_ops` and `num_args` (one per bias, four per batch norm).
    pub(crate) fn fused(self, ops: &[&str]) -> Self {
        let num_args = if ops.first() == Some(&"FusedBatchNorm") { 4 } else { 1 };
        self.with("fused_ops", AttrValue::Strings(ops.iter().map(|op| op.to_string()).collect()))
            .with("num_args", AttrValue::Int(num_args))
    }

    fn get<T>(&self, name: &str, kind: &str, pick: impl Fn(&AttrValue) -> Option<T>) -> Result<T, Error> {
        self.0.get(name).and_then(pick).ok_or_else(|| Error::Internal(format!("test node has no {kind} {name}")))
    }
}

#[cfg(test)]
impl Attrs for NodeAttrs {
    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
    fn bool(&self, name: &str) -> Result<bool, Error> {
        self.get(name, "bool", |v| if let AttrValue::Bool(b) = v { Some(*b) } else { None })
    }
    fn int(&self, name: &str) -> Result<i64, Error> {
        self.get(name, "int", |v| if let AttrValue::Int(i) = v { Some(*i) } else { None })
    }
    fn float(&self, name: &str) -> Result<f32, Error> {
        self.get(name, "float", |v| if let AttrValue::Float(f) = v { Some(*f) } else { None })
    }
    fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
        self.get(name, "int list", |v| if let AttrValue::Ints(i) = v { Some(i.clone()) } else { None })
    }
    fn string(&self, name: &str) -> Result<String, Error> {
        self.get(name, "string", |v| if let AttrValue::String(s) = v { Some(s.clone()) } else { None })
    }
    fn dtype(&self, name: &str) -> Result<super::DType, Error> {
        Err(Error::Internal(format!("test node has no type {name}")))
    }
    fn strings(&self, name: &str) -> Result<Vec<String>, Error> {
        self.get(name, "string list", |v| if let AttrValue::Strings(s) = v { Some(s.clone()) } else { None })
    }
}

/// `x` through `activation`, in float64: the tests' reference.
#[cfg(test)]
pub(crate) fn activation_reference(activation: Activation, x: f64) -> f64 {
    match activation {
        Activation::Identity => x,
        Activation::Relu => x.max(0.0),
        Activation::Relu6 => x.clamp(0.0, 6.0),
        Activation::Elu => {
            if x < 0.0 {
                x.exp() - 1.0
            } else {
                x
            }
        }
        Activation::LeakyRelu(alpha) => {
            if x > 0.0 {
                x
            } else {
                x * f64::from(alpha)
            }
        }
        Activation::Tanh => x.tanh(),
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
    }
}

/// Every `fused_ops` list ending in `BiasAdd` or one activation, with the
/// activation it means for a `leakyrelu_alpha` of 0.3.
#[cfg(test)]
pub(crate) const BIAS_LISTS: [(&[&str], Activation); 7] = [
    (&["BiasAdd"], Activation::Identity),
    (&["BiasAdd", "Relu"], Activation::Relu),
    (&["BiasAdd", "Relu6"], Activation::Relu6),
    (&["BiasAdd", "Elu"], Activation::Elu),
    (&["BiasAdd", "LeakyRelu"], Activation::LeakyRelu(0.3)),
    (&["BiasAdd", "Tanh"], Activation::Tanh),
    (&["BiasAdd", "Sigmoid"], Activation::Sigmoid),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unary::UnaryOp;

    fn parse(product: FusedProduct, ops: &[&str], num_args: i64) -> Result<FusedOps, Error> {
        FusedOps::parse(product, ops, num_args, 1e-3, 0.3)
    }

    #[test]
    fn parse_accepts_the_implemented_lists() {
        use FusedProduct::*;
        let activations = [
            ("Relu", Activation::Relu),
            ("Relu6", Activation::Relu6),
            ("Elu", Activation::Elu),
            ("LeakyRelu", Activation::LeakyRelu(0.3)),
            ("Tanh", Activation::Tanh),
            ("Sigmoid", Activation::Sigmoid),
        ];
        for product in [MatMul, Conv2D] {
            let bias = parse(product, &["BiasAdd"], 1).unwrap();
            assert_eq!(bias, FusedOps { channel: ChannelStep::BiasAdd, activation: Activation::Identity });
            for (name, activation) in activations {
                let fused = parse(product, &["BiasAdd", name], 1).unwrap();
                assert_eq!(fused, FusedOps { channel: ChannelStep::BiasAdd, activation });
            }
        }
        let norm = parse(Conv2D, &["FusedBatchNorm", "Relu6"], 4).unwrap();
        assert_eq!(norm.channel, ChannelStep::BatchNorm { epsilon: 1e-3 });
        assert_eq!(norm.num_args(), 4);
    }

    #[test]
    fn parse_refuses_everything_else_naming_the_list() {
        use FusedProduct::*;
        let unimplemented: &[(FusedProduct, &[&str])] = &[
            (MatMul, &["BiasAdd", "Add"]),
            (MatMul, &["BiasAdd", "Add", "Relu"]),
            (MatMul, &["BiasAdd", "GeluApproximate"]),
            (MatMul, &["BiasAdd", "Relu", "Relu"]),
            (MatMul, &["Relu"]),
            (MatMul, &["FusedBatchNorm"]),
            (Conv2D, &["BiasAdd", "Swish"]),
            (Conv2D, &["Relu", "BiasAdd"]),
        ];
        for (product, ops) in unimplemented {
            let error = parse(*product, ops, 1).unwrap_err();
            let message = error.to_string();
            assert!(matches!(error, Error::Tensorflow { code: UNIMPLEMENTED, .. }), "{message}");
            assert!(message.contains(product.op()) && message.contains(&format!("[{}]", ops.join(","))), "{message}");
        }
        let empty: [&str; 0] = [];
        assert!(matches!(parse(MatMul, &empty, 1), Err(Error::InvalidArgument(m)) if m.contains("at least one")));
        let wrong = parse(MatMul, &["BiasAdd", "Relu"], 2).unwrap_err().to_string();
        assert!(wrong.contains("one extra argument") && wrong.contains("num_args is 2"), "{wrong}");
        let wrong = parse(Conv2D, &["FusedBatchNorm"], 1).unwrap_err().to_string();
        assert!(wrong.contains("four extra arguments"), "{wrong}");
    }

    fn vector(values: &[f32]) -> Tensor {
        Tensor::from_vec(&[values.len()], values.to_vec()).unwrap()
    }

    /// Every activation, from every starting channel and over lengths that
    /// cut rows short, against `BiasAdd` followed by the unfused op.
    #[test]
    fn apply_is_bias_add_then_the_unfused_activation_bit_for_bit() {
        let channels = 7;
        let bias: Vec<f32> = (0..channels).map(|c| c as f32 * 0.75 - 2.0).collect();
        let args = [vector(&bias)];
        let values: Vec<f32> = (0..61).map(|i| ((i * 37) % 23) as f32 * 0.6 - 6.5).collect();
        let cases = [
            ("Relu", UnaryOp::Relu),
            ("Relu6", UnaryOp::Relu6),
            ("Elu", UnaryOp::Elu),
            ("LeakyRelu", UnaryOp::LeakyRelu(0.3)),
            ("Tanh", UnaryOp::Tanh),
            ("Sigmoid", UnaryOp::Sigmoid),
        ];
        for (name, unary) in cases {
            let fused = parse(FusedProduct::MatMul, &["BiasAdd", name], 1).unwrap();
            let epilogue = fused.epilogue("_FusedMatMul", &args, channels).unwrap();
            for first in [0, 3, 6] {
                for len in [0, 1, 4, 7, 61] {
                    let mut got = values[..len].to_vec();
                    epilogue.apply(&mut got, first);
                    let biased: Vec<f32> =
                        values[..len].iter().enumerate().map(|(i, &v)| v + bias[(first + i) % channels]).collect();
                    let mut want = vec![0.0; len];
                    unary.run(&biased, &mut want);
                    assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{name} from channel {first}, {len} values"
                    );
                }
            }
        }
    }

    #[test]
    fn batch_norm_normalises_per_channel() {
        let fused = parse(FusedProduct::Conv2D, &["FusedBatchNorm"], 4).unwrap();
        let (scale, offset, mean, variance) = ([2.0, 0.5], [1.0, -1.0], [0.5, -3.0], [3.999, 0.249]);
        let args = [vector(&scale), vector(&offset), vector(&mean), vector(&variance)];
        let epilogue = fused.epilogue("_FusedConv2D", &args, 2).unwrap();
        let mut out = [1.5, 1.0, -0.5, -3.0];
        epilogue.apply_all(&mut out);
        // √(variance + 1e-3) is 2 and 0.5.
        let want = [(1.5 - 0.5) * 2.0 / 2.0 + 1.0, (1.0 + 3.0) * 0.5 / 0.5 - 1.0, (-0.5 - 0.5) + 1.0, -1.0];
        for (g, w) in out.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{out:?} vs {want:?}");
        }
    }

    #[test]
    fn apply_all_splits_large_outputs_at_any_channel() {
        // Large enough for the pool; 13 channels do not divide its chunks.
        let channels = 13;
        let bias: Vec<f32> = (0..channels).map(|c| c as f32).collect();
        let args = [vector(&bias)];
        let epilogue = parse(FusedProduct::MatMul, &["BiasAdd"], 1).unwrap().epilogue("op", &args, channels).unwrap();
        let mut out = vec![0.0f32; 13 * 9001];
        epilogue.apply_all(&mut out);
        assert!(out.iter().enumerate().all(|(i, &v)| v == (i % channels) as f32));
    }

    #[test]
    fn epilogue_checks_its_vectors() {
        let fused = parse(FusedProduct::MatMul, &["BiasAdd"], 1).unwrap();
        let short = [vector(&[1.0, 2.0])];
        let message = fused.epilogue("_FusedMatMul", &short, 3).unwrap_err().to_string();
        assert!(message.contains("bias must be a vector of 3 values") && message.contains("[2]"), "{message}");
        let matrix = [Tensor::from_vec(&[1, 3], vec![0.0f32; 3]).unwrap()];
        assert!(fused.epilogue("_FusedMatMul", &matrix, 3).is_err());
        assert!(fused.epilogue("_FusedMatMul", &[], 3).is_err());
    }
}
