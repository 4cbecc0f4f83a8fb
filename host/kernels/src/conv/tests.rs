use std::collections::HashMap;

use super::*;
use crate::epilogue::{activation_reference, Activation, AttrValue, NodeAttrs, BIAS_LISTS};
use crate::{LocalContext, Tensor};

/// Attributes from a map, for building kernels without TensorFlow.
#[derive(Default)]
pub(super) struct TestAttrs {
    ints: HashMap<&'static str, Vec<i64>>,
    strings: HashMap<&'static str, String>,
}

impl TestAttrs {
    pub(super) fn ints(mut self, name: &'static str, values: &[i64]) -> Self {
        self.ints.insert(name, values.to_vec());
        self
    }
    pub(super) fn string(mut self, name: &'static str, value: &str) -> Self {
        self.strings.insert(name, value.to_owned());
        self
    }
}

impl Attrs for TestAttrs {
    fn has(&self, name: &str) -> bool {
        self.ints.contains_key(name) || self.strings.contains_key(name)
    }
    fn bool(&self, name: &str) -> Result<bool, Error> {
        Err(Error::Internal(format!("no bool {name}")))
    }
    fn int(&self, name: &str) -> Result<i64, Error> {
        Err(Error::Internal(format!("no int {name}")))
    }
    fn float(&self, name: &str) -> Result<f32, Error> {
        Err(Error::Internal(format!("no float {name}")))
    }
    fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
        self.ints.get(name).cloned().ok_or_else(|| Error::Internal(format!("no ints {name}")))
    }
    fn string(&self, name: &str) -> Result<String, Error> {
        self.strings.get(name).cloned().ok_or_else(|| Error::Internal(format!("no string {name}")))
    }
    fn dtype(&self, name: &str) -> Result<DType, Error> {
        Err(Error::Internal(format!("no dtype {name}")))
    }
}

pub(super) fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn build(op: &str, attrs: &TestAttrs) -> Result<Box<dyn Kernel>, Error> {
    let def = KERNELS.iter().find(|d| d.op == op).expect("registered");
    (def.build)(attrs)
}

/// One convolution's shapes and attributes (the depthwise tests use it too).
#[derive(Debug, Clone, Copy)]
pub(super) struct Case {
    pub(super) input: [usize; 4],
    pub(super) filter: [usize; 4],
    pub(super) strides: [usize; 2],
    pub(super) dilations: [usize; 2],
    /// "SAME", "VALID" or "EXPLICIT" (then `explicit` holds t, b, l, r).
    pub(super) padding: &'static str,
    pub(super) explicit: [usize; 4],
}

impl Case {
    pub(super) fn attrs(&self) -> TestAttrs {
        let s = |v: usize| v as i64;
        let mut attrs = TestAttrs::default()
            .ints("strides", &[1, s(self.strides[0]), s(self.strides[1]), 1])
            .ints("dilations", &[1, s(self.dilations[0]), s(self.dilations[1]), 1])
            .string("padding", self.padding)
            .string("data_format", "NHWC");
        if self.padding == "EXPLICIT" {
            let e = self.explicit;
            attrs = attrs.ints("explicit_paddings", &[0, 0, s(e[0]), s(e[1]), s(e[2]), s(e[3]), 0, 0]);
        }
        attrs
    }

    /// Output size and padding before, per TensorFlow's documented formulas.
    pub(super) fn dim(&self, axis: usize) -> (usize, usize) {
        let input = self.input[1 + axis] as i64;
        let eff = ((self.filter[axis] as i64) - 1) * self.dilations[axis] as i64 + 1;
        let s = self.strides[axis] as i64;
        match self.padding {
            "VALID" => (((input - eff + s) / s).max(0) as usize, 0),
            "SAME" => {
                let out = (input + s - 1) / s;
                let needed = ((out - 1) * s + eff - input).max(0);
                (out as usize, (needed / 2) as usize)
            }
            _ => {
                let (b, a) = (self.explicit[2 * axis] as i64, self.explicit[2 * axis + 1] as i64);
                (((input + b + a - eff + s) / s) as usize, b as usize)
            }
        }
    }

    fn output(&self) -> [usize; 4] {
        [self.input[0], self.dim(0).0, self.dim(1).0, self.filter[3]]
    }

    /// Calls `f(out index, input index, filter index)` for every product
    /// term of the convolution.
    fn for_each_term(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [n, ih, iw, ic] = self.input;
        let [kh, kw, _, oc] = self.filter;
        let ((oh, pt), (ow, pl)) = (self.dim(0), self.dim(1));
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy = (oy * self.strides[0] + ky * self.dilations[0]) as i64 - pt as i64;
                            let ix = (ox * self.strides[1] + kx * self.dilations[1]) as i64 - pl as i64;
                            if iy < 0 || ix < 0 || iy >= ih as i64 || ix >= iw as i64 {
                                continue;
                            }
                            for ci in 0..ic {
                                for co in 0..oc {
                                    let o = ((b * oh + oy) * ow + ox) * oc + co;
                                    let i = ((b * ih + iy as usize) * iw + ix as usize) * ic + ci;
                                    let w = ((ky * kw + kx) * ic + ci) * oc + co;
                                    f(o, i, w);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn check(&self) {
        let len = |s: &[usize]| s.iter().product::<usize>();
        let (out_shape, in_len, f_len) = (self.output(), len(&self.input), len(&self.filter));
        let x = values(in_len, 1);
        let w = values(f_len, 2);
        let g = values(len(&out_shape), 3);
        let (mut y_ref, mut dx_ref, mut dw_ref) = (vec![0f64; len(&out_shape)], vec![0f64; in_len], vec![0f64; f_len]);
        self.for_each_term(|o, i, k| {
            y_ref[o] += x[i] as f64 * w[k] as f64;
            dx_ref[i] += g[o] as f64 * w[k] as f64;
            dw_ref[k] += g[o] as f64 * x[i] as f64;
        });
        let attrs = self.attrs();
        let t = |shape: &[usize], v: &Vec<f32>| Tensor::from_vec(shape, v.clone()).unwrap();
        let sizes = |s: [usize; 4]| Tensor::from_vec(&[4], s.map(|v| v as i32).to_vec()).unwrap();

        let y = LocalContext::run(
            &*build("Conv2D", &attrs).unwrap(),
            vec![t(&self.input, &x), t(&self.filter, &w)],
            &[DType::F32],
        )
        .unwrap();
        assert_eq!(y[0].shape(), &out_shape, "{self:?}");
        compare("Conv2D", self, &y[0].to_vec::<f32>().unwrap(), &y_ref);

        let dx = LocalContext::run(
            &*build("Conv2DBackpropInput", &attrs).unwrap(),
            vec![sizes(self.input), t(&self.filter, &w), t(&out_shape, &g)],
            &[DType::F32],
        )
        .unwrap();
        assert_eq!(dx[0].shape(), &self.input, "{self:?}");
        compare("Conv2DBackpropInput", self, &dx[0].to_vec::<f32>().unwrap(), &dx_ref);

        let dw = LocalContext::run(
            &*build("Conv2DBackpropFilter", &attrs).unwrap(),
            vec![t(&self.input, &x), sizes(self.filter), t(&out_shape, &g)],
            &[DType::F32],
        )
        .unwrap();
        assert_eq!(dw[0].shape(), &self.filter, "{self:?}");
        compare("Conv2DBackpropFilter", self, &dw[0].to_vec::<f32>().unwrap(), &dw_ref);
    }
}

fn compare(op: &str, case: &Case, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{op} {case:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{op} {case:?}: element {i} is {g}, expected {w}");
    }
}

pub(super) fn case(
    input: [usize; 4],
    filter: [usize; 4],
    strides: [usize; 2],
    dilations: [usize; 2],
    padding: &'static str,
) -> Case {
    Case { input, filter, strides, dilations, padding, explicit: [0; 4] }
}

#[test]
fn convolutions_match_reference_on_odd_shapes() {
    let cases = [
        case([1, 1, 1, 1], [1, 1, 1, 1], [1, 1], [1, 1], "VALID"),
        case([2, 7, 5, 3], [3, 3, 3, 4], [1, 1], [1, 1], "SAME"),
        case([2, 7, 5, 3], [3, 3, 3, 4], [1, 1], [1, 1], "VALID"),
        case([3, 11, 13, 2], [1, 1, 2, 5], [1, 1], [1, 1], "VALID"),
        case([3, 11, 13, 2], [1, 1, 2, 5], [2, 2], [1, 1], "SAME"),
        case([2, 9, 7, 1], [2, 2, 1, 3], [1, 1], [1, 1], "SAME"),
        case([2, 9, 8, 2], [4, 2, 2, 3], [2, 3], [1, 1], "SAME"),
        case([1, 13, 11, 3], [3, 3, 3, 2], [1, 1], [2, 2], "SAME"),
        case([1, 13, 11, 3], [3, 2, 3, 2], [2, 1], [2, 3], "VALID"),
        case([2, 5, 5, 2], [5, 5, 2, 3], [1, 1], [1, 1], "VALID"),
        case([1, 3, 3, 1], [5, 5, 1, 1], [1, 1], [1, 1], "SAME"),
        case([0, 7, 7, 3], [3, 3, 3, 4], [1, 1], [1, 1], "SAME"),
        case([2, 2, 3, 3], [3, 3, 3, 4], [1, 1], [1, 1], "VALID"),
        Case { padding: "EXPLICIT", explicit: [1, 2, 0, 3], ..case([2, 6, 5, 2], [3, 2, 2, 3], [2, 1], [1, 2], "") },
        Case { padding: "EXPLICIT", explicit: [2, 2, 1, 1], ..case([1, 0, 0, 2], [1, 1, 2, 3], [1, 1], [1, 1], "") },
    ];
    for case in cases {
        case.check();
    }
}

#[test]
fn large_convolutions_use_the_pool() {
    case([8, 28, 28, 1], [3, 3, 1, 8], [1, 1], [1, 1], "SAME").check();
    case([6, 14, 14, 8], [3, 3, 8, 16], [1, 1], [1, 1], "VALID").check();
    case([4, 15, 17, 16], [1, 1, 16, 8], [1, 1], [1, 1], "VALID").check();
    case([3, 40, 40, 2], [3, 3, 2, 3], [2, 2], [1, 1], "SAME").check();
}

#[test]
fn invalid_convolutions_are_errors() {
    let attrs = case([1, 5, 5, 2], [3, 3, 2, 1], [1, 1], [1, 1], "VALID").attrs();
    let kernel = build("Conv2D", &attrs).unwrap();
    let run = |input: &[usize], filter: &[usize]| {
        let x = Tensor::zeros(DType::F32, input).unwrap();
        let w = Tensor::zeros(DType::F32, filter).unwrap();
        LocalContext::run(&*kernel, vec![x, w], &[DType::F32]).map(|_| ()).unwrap_err().to_string()
    };
    assert!(run(&[1, 5, 5, 2], &[3, 3, 3, 1]).contains("evenly divisible"));
    assert!(run(&[1, 5, 5, 4], &[3, 3, 2, 1]).contains("grouped"));
    assert!(run(&[5, 5, 2], &[3, 3, 2, 1]).contains("4-dimensional"));
    assert!(run(&[1, 5, 5, 2], &[3, 0, 2, 1]).contains("zero elements"));
    // VALID with a window larger than the input: TF truncates toward zero.
    let x = Tensor::zeros(DType::F32, &[1, 2, 2, 2]).unwrap();
    let w = Tensor::zeros(DType::F32, &[3, 3, 2, 1]).unwrap();
    let y = LocalContext::run(&*kernel, vec![x, w], &[DType::F32]).unwrap();
    assert_eq!(y[0].shape(), &[1, 0, 0, 1]);

    let nchw = case([1, 5, 5, 2], [3, 3, 2, 1], [1, 1], [1, 1], "VALID").attrs().string("data_format", "NCHW");
    assert!(build("Conv2D", &nchw).err().unwrap().to_string().contains("NCHW"));
    let bad = TestAttrs::default().ints("strides", &[2, 1, 1, 1]).string("padding", "SAME");
    assert!(build("Conv2D", &bad).is_err());
    let bad = TestAttrs::default()
        .ints("strides", &[1, 1, 1, 1])
        .string("padding", "SAME")
        .ints("explicit_paddings", &[0; 8]);
    assert!(build("Conv2D", &bad).is_err());

    // out_backprop of the wrong shape
    let kernel = build("Conv2DBackpropInput", &attrs).unwrap();
    let sizes = Tensor::from_vec(&[4], vec![1i32, 5, 5, 2]).unwrap();
    let w = Tensor::zeros(DType::F32, &[3, 3, 2, 1]).unwrap();
    let g = Tensor::zeros(DType::F32, &[1, 4, 3, 1]).unwrap();
    let e = LocalContext::run(&*kernel, vec![sizes, w, g], &[DType::F32]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

// ------------------------------------------------------------------ pooling

#[derive(Debug, Clone, Copy)]
struct PoolCase {
    input: [usize; 4],
    ksize: [usize; 2],
    strides: [usize; 2],
    padding: &'static str,
}

impl PoolCase {
    fn attrs(&self) -> TestAttrs {
        let s = |v: usize| v as i64;
        TestAttrs::default()
            .ints("ksize", &[1, s(self.ksize[0]), s(self.ksize[1]), 1])
            .ints("strides", &[1, s(self.strides[0]), s(self.strides[1]), 1])
            .string("padding", self.padding)
            .string("data_format", "NHWC")
    }

    fn as_conv(&self) -> Case {
        case(self.input, [self.ksize[0], self.ksize[1], 1, 1], self.strides, [1, 1], self.padding)
    }

    /// For each output element, the input indexes of its window (row-major).
    fn windows(&self) -> (Vec<usize>, Vec<Vec<usize>>) {
        let conv = self.as_conv();
        let [n, ih, iw, c] = self.input;
        let ((oh, pt), (ow, pl)) = (conv.dim(0), conv.dim(1));
        let mut windows = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let mut w = Vec::new();
                        for ky in 0..self.ksize[0] {
                            for kx in 0..self.ksize[1] {
                                let iy = (oy * self.strides[0] + ky) as i64 - pt as i64;
                                let ix = (ox * self.strides[1] + kx) as i64 - pl as i64;
                                if iy >= 0 && ix >= 0 && iy < ih as i64 && ix < iw as i64 {
                                    w.push(((b * ih + iy as usize) * iw + ix as usize) * c + ch);
                                }
                            }
                        }
                        windows.push(w);
                    }
                }
            }
        }
        (vec![n, oh, ow, c], windows)
    }

    fn check(&self, x: &[f32]) {
        let (out_shape, windows) = self.windows();
        let g = values(windows.len(), 9);
        let attrs = self.attrs();
        let xt = || Tensor::from_vec(&self.input, x.to_vec()).unwrap();
        let gt = || Tensor::from_vec(&out_shape, g.clone()).unwrap();
        let in_len = x.len();

        // max
        let y = LocalContext::run(&*build("MaxPool", &attrs).unwrap(), vec![xt()], &[DType::F32]).unwrap();
        let y = y[0].to_vec::<f32>().unwrap();
        let mut dx_ref = vec![0f32; in_len];
        for (o, w) in windows.iter().enumerate() {
            let mut best = w[0];
            for &i in &w[1..] {
                if x[i] > x[best] {
                    best = i;
                }
            }
            assert_eq!(y[o], x[best], "MaxPool {self:?} output {o}");
            dx_ref[best] += g[o];
        }
        let yt = Tensor::from_vec(&out_shape, y).unwrap();
        let dx =
            LocalContext::run(&*build("MaxPoolGrad", &attrs).unwrap(), vec![xt(), yt, gt()], &[DType::F32]).unwrap();
        assert_eq!(dx[0].shape(), &self.input);
        let dx = dx[0].to_vec::<f32>().unwrap();
        for i in 0..in_len {
            assert!((dx[i] - dx_ref[i]).abs() <= 1e-5, "MaxPoolGrad {self:?} element {i}: {} vs {}", dx[i], dx_ref[i]);
        }

        // average
        let y = LocalContext::run(&*build("AvgPool", &attrs).unwrap(), vec![xt()], &[DType::F32]).unwrap();
        let y = y[0].to_vec::<f32>().unwrap();
        let mut dx_ref = vec![0f64; in_len];
        for (o, w) in windows.iter().enumerate() {
            let mean = w.iter().map(|&i| x[i] as f64).sum::<f64>() / w.len() as f64;
            assert!((y[o] as f64 - mean).abs() <= 1e-5, "AvgPool {self:?} output {o}: {} vs {mean}", y[o]);
            for &i in w {
                dx_ref[i] += g[o] as f64 / w.len() as f64;
            }
        }
        let shape = Tensor::from_vec(&[4], self.input.map(|v| v as i32).to_vec()).unwrap();
        let dx = LocalContext::run(&*build("AvgPoolGrad", &attrs).unwrap(), vec![shape, gt()], &[DType::F32]).unwrap();
        assert_eq!(dx[0].shape(), &self.input);
        let dx = dx[0].to_vec::<f32>().unwrap();
        for i in 0..in_len {
            assert!((dx[i] as f64 - dx_ref[i]).abs() <= 1e-5, "AvgPoolGrad {self:?} element {i}");
        }
    }
}

#[test]
fn pooling_matches_reference() {
    let cases = [
        PoolCase { input: [1, 1, 1, 1], ksize: [1, 1], strides: [1, 1], padding: "VALID" },
        PoolCase { input: [2, 7, 5, 3], ksize: [2, 2], strides: [2, 2], padding: "VALID" },
        PoolCase { input: [2, 7, 5, 3], ksize: [2, 2], strides: [2, 2], padding: "SAME" },
        PoolCase { input: [2, 7, 5, 3], ksize: [3, 3], strides: [1, 1], padding: "SAME" },
        PoolCase { input: [1, 11, 13, 2], ksize: [3, 2], strides: [2, 3], padding: "SAME" },
        PoolCase { input: [1, 11, 13, 2], ksize: [4, 4], strides: [3, 1], padding: "VALID" },
        PoolCase { input: [0, 4, 4, 2], ksize: [2, 2], strides: [2, 2], padding: "VALID" },
        PoolCase { input: [2, 4, 4, 0], ksize: [2, 2], strides: [2, 2], padding: "SAME" },
        PoolCase { input: [1, 2, 2, 1], ksize: [3, 3], strides: [1, 1], padding: "VALID" },
        PoolCase { input: [8, 28, 28, 8], ksize: [2, 2], strides: [2, 2], padding: "VALID" },
        PoolCase { input: [4, 15, 15, 5], ksize: [3, 3], strides: [2, 2], padding: "SAME" },
    ];
    for case in cases {
        let len = case.input.iter().product();
        case.check(&values(len, 5));
        // Many ties: the gradient goes to the first maximum in the window.
        let ties: Vec<f32> = values(len, 6).iter().map(|v| (v * 2.0).round()).collect();
        case.check(&ties);
    }
}

#[test]
fn max_pool_of_minus_infinity_is_lowest() {
    // TensorFlow starts the maximum at the lowest finite float.
    let case = PoolCase { input: [1, 2, 2, 1], ksize: [2, 2], strides: [1, 1], padding: "VALID" };
    let x = Tensor::from_vec(&[1, 2, 2, 1], vec![f32::NEG_INFINITY; 4]).unwrap();
    let y = LocalContext::run(&*build("MaxPool", &case.attrs()).unwrap(), vec![x], &[DType::F32]).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![f32::MIN]);
}

#[test]
fn invalid_pooling_is_an_error() {
    let bad = TestAttrs::default().ints("ksize", &[2, 1, 1, 1]).ints("strides", &[1; 4]).string("padding", "SAME");
    assert!(build("MaxPool", &bad).is_err());
    let bad = TestAttrs::default().ints("ksize", &[1, 1, 1, 2]).ints("strides", &[1; 4]).string("padding", "SAME");
    assert!(build("AvgPool", &bad).is_err());
    let case = PoolCase { input: [1, 4, 4, 1], ksize: [2, 2], strides: [2, 2], padding: "VALID" };
    let kernel = build("MaxPoolGrad", &case.attrs()).unwrap();
    let x = Tensor::zeros(DType::F32, &[1, 4, 4, 1]).unwrap();
    let y = Tensor::zeros(DType::F32, &[1, 2, 2, 1]).unwrap();
    let g = Tensor::zeros(DType::F32, &[1, 3, 2, 1]).unwrap();
    assert!(LocalContext::run(&*kernel, vec![x, y, g], &[DType::F32]).is_err());
    let kernel = build("AvgPoolGrad", &case.attrs()).unwrap();
    let shape = Tensor::from_vec(&[3], vec![1i32, 4, 4]).unwrap();
    let g = Tensor::zeros(DType::F32, &[1, 2, 2, 1]).unwrap();
    assert!(LocalContext::run(&*kernel, vec![shape, g], &[DType::F32]).is_err());
}

// ------------------------------------------------------------ _FusedConv2D

impl Case {
    /// `_FusedConv2D`'s attributes for this convolution and `fused_ops`.
    fn fused_attrs(&self, fused_ops: &[&str]) -> NodeAttrs {
        let s = |v: usize| v as i64;
        let e = self.explicit;
        let explicit =
            if self.padding == "EXPLICIT" { vec![0, 0, s(e[0]), s(e[1]), s(e[2]), s(e[3]), 0, 0] } else { vec![] };
        NodeAttrs::default()
            .with("strides", AttrValue::Ints(vec![1, s(self.strides[0]), s(self.strides[1]), 1]))
            .with("dilations", AttrValue::Ints(vec![1, s(self.dilations[0]), s(self.dilations[1]), 1]))
            .with("padding", AttrValue::String(self.padding.into()))
            .with("explicit_paddings", AttrValue::Ints(explicit))
            .with("data_format", AttrValue::String("NHWC".into()))
            .with("filter_format", AttrValue::String("HWIO".into()))
            .with("num_host_args", AttrValue::Int(0))
            .with("epsilon", AttrValue::Float(1e-3))
            .with("leakyrelu_alpha", AttrValue::Float(0.3))
            .fused(fused_ops)
    }

    /// Every `fused_ops` list `_FusedConv2D` implements, against the f64
    /// convolution, then bias (or batch norm) and activation in f64.
    fn check_fused(&self) {
        let len = |s: &[usize]| s.iter().product::<usize>();
        let out_shape = self.output();
        let oc = self.filter[3];
        let (x, w) = (values(len(&self.input), 1), values(len(&self.filter), 2));
        let mut conv = vec![0f64; len(&out_shape)];
        self.for_each_term(|o, i, k| conv[o] += x[i] as f64 * w[k] as f64);
        let t = |shape: &[usize], v: &[f32]| Tensor::from_vec(shape, v.to_vec()).unwrap();
        let run = |node: &NodeAttrs, args: &[Vec<f32>]| {
            let mut inputs = vec![t(&self.input, &x), t(&self.filter, &w)];
            inputs.extend(args.iter().map(|arg| t(&[oc], arg)));
            let out = LocalContext::run(&*build_fused(node).unwrap(), inputs, &[DType::F32]).unwrap().remove(0);
            assert_eq!(out.shape(), &out_shape, "{self:?}");
            out.to_vec::<f32>().unwrap()
        };
        let bias = values(oc, 3);
        for (fused_ops, activation) in BIAS_LISTS {
            let got = run(&self.fused_attrs(fused_ops), &[bias.clone()]);
            let want: Vec<f64> = conv
                .iter()
                .enumerate()
                .map(|(o, &c)| activation_reference(activation, c + bias[o % oc] as f64))
                .collect();
            compare(&format!("_FusedConv2D {fused_ops:?}"), self, &got, &want);
        }
        // scale, offset, mean, variance (positive).
        let norm = [values(oc, 4), values(oc, 5), values(oc, 6), values(oc, 7).iter().map(|v| v + 1.5).collect()];
        for (ops, activation) in
            [(&["FusedBatchNorm"][..], Activation::Identity), (&["FusedBatchNorm", "Elu"], Activation::Elu)]
        {
            let got = run(&self.fused_attrs(ops), &norm);
            let [scale, offset, mean, variance] = &norm;
            let want: Vec<f64> = conv
                .iter()
                .enumerate()
                .map(|(o, &c)| {
                    let ch = o % oc;
                    let factor = scale[ch] as f64 / (variance[ch] as f64 + 1e-3).sqrt();
                    activation_reference(activation, (c - mean[ch] as f64) * factor + offset[ch] as f64)
                })
                .collect();
            compare(&format!("_FusedConv2D {ops:?}"), self, &got, &want);
        }
    }
}

fn build_fused(node: &NodeAttrs) -> Result<Box<dyn Kernel>, Error> {
    let def = KERNELS.iter().find(|d| d.op == "_FusedConv2D").expect("registered");
    (def.build)(node)
}

#[test]
fn fused_convolutions_match_reference() {
    let cases = [
        case([1, 1, 1, 1], [1, 1, 1, 1], [1, 1], [1, 1], "VALID"),
        case([2, 7, 5, 3], [3, 3, 3, 4], [1, 1], [1, 1], "SAME"),
        case([3, 11, 13, 2], [1, 1, 2, 5], [1, 1], [1, 1], "VALID"),
        case([3, 11, 13, 2], [1, 1, 2, 5], [2, 2], [1, 1], "SAME"),
        case([1, 13, 11, 3], [3, 2, 3, 2], [2, 1], [2, 3], "VALID"),
        case([0, 7, 7, 3], [3, 3, 3, 4], [1, 1], [1, 1], "SAME"),
        Case { padding: "EXPLICIT", explicit: [1, 2, 0, 3], ..case([2, 6, 5, 2], [3, 2, 2, 3], [2, 1], [1, 2], "") },
        // On the pool: tiles of im2col, and a pointwise product run whole.
        case([6, 14, 14, 8], [3, 3, 8, 16], [1, 1], [1, 1], "VALID"),
        case([4, 15, 17, 16], [1, 1, 16, 8], [1, 1], [1, 1], "VALID"),
    ];
    for case in cases {
        case.check_fused();
    }
}

#[test]
fn fused_convolution_refuses_what_it_does_not_implement() {
    let c = case([1, 5, 5, 2], [3, 3, 2, 1], [1, 1], [1, 1], "SAME");
    let refused = |node: NodeAttrs| build_fused(&node).err().expect("refused").to_string();
    let message = refused(c.fused_attrs(&["BiasAdd", "Add"]));
    assert!(message.contains("_FusedConv2D: fusion [BiasAdd,Add] is not implemented"), "{message}");
    let message = refused(c.fused_attrs(&["BiasAdd"]).with("data_format", AttrValue::String("NCHW".into())));
    assert!(message.contains("_FusedConv2D") && message.contains("NHWC"), "{message}");
    let message = refused(c.fused_attrs(&["BiasAdd"]).with("filter_format", AttrValue::String("OIHW".into())));
    assert!(message.contains("HWIO") && message.contains("OIHW"), "{message}");
    let message = refused(c.fused_attrs(&["BiasAdd"]).with("num_host_args", AttrValue::Int(2)));
    assert!(message.contains("num_host_args"), "{message}");
}

/// Rough timings at the Keras CNN shapes: `cargo test --release -- --ignored bench`.
#[test]
#[ignore]
fn bench_keras_shapes() {
    for (input, filter) in [([32, 28, 28, 1], [3, 3, 1, 8]), ([32, 14, 14, 8], [3, 3, 8, 16])] {
        let c = case(input, filter, [1, 1], [1, 1], "VALID");
        let geom = ConvKernel::new(ConvOp::Forward, 2, &c.attrs()).unwrap().geometry(&input, &filter).unwrap();
        let x = values(input.iter().product(), 1);
        let w = values(filter.iter().product(), 2);
        let out_len: usize = geom.output_shape().iter().product();
        let g = values(out_len, 3);
        let mut y = vec![0f32; out_len];
        let mut dx = vec![0f32; x.len()];
        let mut dw = vec![0f32; w.len()];
        let time = |f: &mut dyn FnMut()| {
            f();
            let t = std::time::Instant::now();
            for _ in 0..200 {
                f();
            }
            t.elapsed().as_secs_f64() / 200.0 * 1e6
        };
        let tf = time(&mut || geom.forward(&x, &w, &mut y, None).unwrap());
        let ti = time(&mut || geom.backprop_input(&g, &w, &mut dx).unwrap());
        let tw = time(&mut || geom.backprop_filter(&x, &g, &mut dw).unwrap());
        eprintln!("{input:?} {filter:?}: fwd {tf:.1} us, bp_input {ti:.1} us, bp_filter {tw:.1} us");
    }
}
