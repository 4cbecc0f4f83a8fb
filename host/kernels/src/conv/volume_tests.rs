//! 3-D convolution and pooling against direct loops, and the 2-D ops as
//! their one-plane special case.

use super::tests::{values, TestAttrs};
use super::*;
use crate::{LocalContext, Tensor};

fn build(op: &str, attrs: &TestAttrs) -> Result<Box<dyn Kernel>, Error> {
    let def = KERNELS.iter().find(|d| d.op == op).expect("registered");
    (def.build)(attrs)
}

fn run(op: &str, attrs: &TestAttrs, inputs: Vec<Tensor>) -> Result<Tensor, Error> {
    Ok(LocalContext::run(&*build(op, attrs)?, inputs, &[DType::F32])?.remove(0))
}

fn t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape, v.to_vec()).unwrap()
}

fn sizes(shape: &[usize]) -> Tensor {
    Tensor::from_vec(&[shape.len()], shape.iter().map(|&v| v as i32).collect()).unwrap()
}

/// Output size and padding before of one dimension, by TensorFlow's
/// documented formulas.
fn dim(input: usize, size: usize, stride: usize, dilation: usize, padding: &str) -> (usize, usize) {
    let (input, eff, s) = (input as i64, ((size - 1) * dilation + 1) as i64, stride as i64);
    if padding == "VALID" {
        return (((input - eff + s) / s).max(0) as usize, 0);
    }
    let out = (input + s - 1) / s;
    (out as usize, (((out - 1) * s + eff - input).max(0) / 2) as usize)
}

/// One 3-D convolution: NDHWC input, DHWIO filter.
#[derive(Debug, Clone, Copy)]
struct Case3 {
    input: [usize; 5],
    filter: [usize; 5],
    strides: [usize; 3],
    dilations: [usize; 3],
    padding: &'static str,
}

impl Case3 {
    fn attrs(&self) -> TestAttrs {
        let s = |v: [usize; 3]| [1, v[0] as i64, v[1] as i64, v[2] as i64, 1];
        TestAttrs::default()
            .ints("strides", &s(self.strides))
            .ints("dilations", &s(self.dilations))
            .string("padding", self.padding)
            .string("data_format", "NDHWC")
    }

    fn dims(&self) -> [(usize, usize); 3] {
        std::array::from_fn(|a| {
            dim(self.input[1 + a], self.filter[a], self.strides[a], self.dilations[a], self.padding)
        })
    }

    fn output(&self) -> [usize; 5] {
        let [(od, _), (oh, _), (ow, _)] = self.dims();
        [self.input[0], od, oh, ow, self.filter[4]]
    }

    /// Calls `f(out index, input index, filter index)` for every product term.
    fn for_each_term(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [n, id, ih, iw, ic] = self.input;
        let [kd, kh, kw, _, oc] = self.filter;
        let [(od, pd), (oh, ph), (ow, pw)] = self.dims();
        let at = |o: usize, k: usize, a: usize, pad: usize, len: usize| {
            let i = (o * self.strides[a] + k * self.dilations[a]) as i64 - pad as i64;
            (0..len as i64).contains(&i).then_some(i as usize)
        };
        for b in 0..n {
            for (oz, oy, ox) in (0..od).flat_map(|z| (0..oh).flat_map(move |y| (0..ow).map(move |x| (z, y, x)))) {
                for (z, y, x) in (0..kd).flat_map(|z| (0..kh).flat_map(move |y| (0..kw).map(move |x| (z, y, x)))) {
                    let (Some(iz), Some(iy), Some(ix)) =
                        (at(oz, z, 0, pd, id), at(oy, y, 1, ph, ih), at(ox, x, 2, pw, iw))
                    else {
                        continue;
                    };
                    for ci in 0..ic {
                        for co in 0..oc {
                            let o = ((((b * od + oz) * oh + oy) * ow) + ox) * oc + co;
                            let i = ((((b * id + iz) * ih + iy) * iw) + ix) * ic + ci;
                            let w = ((((z * kh + y) * kw) + x) * ic + ci) * oc + co;
                            f(o, i, w);
                        }
                    }
                }
            }
        }
    }

    fn check(&self) {
        let len = |s: &[usize]| s.iter().product::<usize>();
        let out = self.output();
        let (x, w, g) = (values(len(&self.input), 1), values(len(&self.filter), 2), values(len(&out), 3));
        let (mut y_ref, mut dx_ref, mut dw_ref) = (vec![0f64; g.len()], vec![0f64; x.len()], vec![0f64; w.len()]);
        self.for_each_term(|o, i, k| {
            y_ref[o] += x[i] as f64 * w[k] as f64;
            dx_ref[i] += g[o] as f64 * w[k] as f64;
            dw_ref[k] += g[o] as f64 * x[i] as f64;
        });
        let attrs = self.attrs();
        let y = run("Conv3D", &attrs, vec![t(&self.input, &x), t(&self.filter, &w)]).unwrap();
        self.compare("Conv3D", &y, &out, &y_ref);
        let dx = run("Conv3DBackpropInputV2", &attrs, vec![sizes(&self.input), t(&self.filter, &w), t(&out, &g)]);
        self.compare("Conv3DBackpropInputV2", &dx.unwrap(), &self.input, &dx_ref);
        let dw = run("Conv3DBackpropFilterV2", &attrs, vec![t(&self.input, &x), sizes(&self.filter), t(&out, &g)]);
        self.compare("Conv3DBackpropFilterV2", &dw.unwrap(), &self.filter, &dw_ref);
    }

    fn compare(&self, op: &str, got: &Tensor, shape: &[usize], want: &[f64]) {
        assert_eq!(got.shape(), shape, "{op} {self:?}");
        for (i, (&g, &w)) in got.to_vec::<f32>().unwrap().iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{op} {self:?}: element {i} is {g}, expected {w}");
        }
    }
}

fn case3(input: [usize; 5], filter: [usize; 5], strides: [usize; 3], padding: &'static str) -> Case3 {
    Case3 { input, filter, strides, dilations: [1; 3], padding }
}

#[test]
fn volume_convolutions_match_reference() {
    let cases = [
        case3([1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1], "VALID"),
        case3([2, 5, 4, 6, 3], [2, 3, 3, 3, 4], [1, 1, 1], "SAME"),
        case3([2, 5, 4, 6, 3], [2, 3, 3, 3, 4], [1, 1, 1], "VALID"),
        case3([1, 7, 5, 6, 2], [3, 2, 3, 2, 3], [2, 1, 2], "SAME"),
        case3([2, 4, 4, 4, 4], [1, 1, 1, 4, 5], [1, 1, 1], "VALID"),
        case3([1, 3, 3, 3, 1], [5, 5, 5, 1, 2], [1, 1, 1], "SAME"),
        case3([0, 3, 3, 3, 2], [2, 2, 2, 2, 2], [1, 1, 1], "SAME"),
        // larger than PARALLEL_MIN_WORK: tiles spread over the pool
        case3([3, 6, 12, 10, 3], [3, 3, 3, 3, 8], [1, 1, 1], "SAME"),
        // dilations, which TensorFlow's CPU kernel refuses
        Case3 { dilations: [2, 1, 3], ..case3([1, 7, 6, 9, 2], [2, 3, 2, 2, 3], [1, 1, 1], "SAME") },
        Case3 { dilations: [3, 2, 2], ..case3([2, 7, 6, 8, 1], [2, 2, 3, 1, 2], [2, 1, 1], "VALID") },
    ];
    for case in cases {
        case.check();
    }
}

#[test]
fn one_plane_volume_convolution_is_the_plane_convolution() {
    // A 1-plane input under a 1-tap plane window is Conv2D, bit for bit:
    // the same patches in the same order go through the same product.
    let (input, filter) = ([2, 1, 7, 9, 3], [1, 3, 2, 3, 4]);
    let (x, w) = (values(input.iter().product(), 4), values(filter.iter().product(), 5));
    let volume = case3(input, filter, [1, 2, 1], "SAME");
    let y3 = run("Conv3D", &volume.attrs(), vec![t(&input, &x), t(&filter, &w)]).unwrap();
    let plane = super::tests::case([2, 7, 9, 3], [3, 2, 3, 4], [2, 1], [1, 1], "SAME");
    let y2 = run("Conv2D", &plane.attrs(), vec![t(&[2, 7, 9, 3], &x), t(&[3, 2, 3, 4], &w)]).unwrap();
    assert_eq!(y3.shape()[2..], y2.shape()[1..]);
    assert_eq!(y3.to_vec::<f32>().unwrap(), y2.to_vec::<f32>().unwrap());
}

#[test]
fn invalid_volume_convolutions_are_errors() {
    let c = case3([1, 4, 4, 4, 2], [2, 2, 2, 2, 3], [1, 1, 1], "VALID");
    let x = || Tensor::zeros(DType::F32, &c.input).unwrap();
    let w = || Tensor::zeros(DType::F32, &c.filter).unwrap();
    let message = |r: Result<Tensor, Error>| r.unwrap_err().to_string();
    // A 2-D input.
    let m = message(run("Conv3D", &c.attrs(), vec![Tensor::zeros(DType::F32, &[1, 4, 4, 2]).unwrap(), w()]));
    assert!(m.contains("Conv3D") && m.contains("5-dimensional"), "{m}");
    // Channels-first and 4-value strides are refused when the kernel is built.
    assert!(build("Conv3D", &c.attrs().string("data_format", "NCDHW")).is_err());
    assert!(build("Conv3D", &c.attrs().ints("strides", &[1, 1, 1, 1])).is_err());
    assert!(build("Conv3D", &c.attrs().ints("strides", &[2, 1, 1, 1, 1])).is_err());
    // Filter depth must match.
    let bad = Tensor::zeros(DType::F32, &[2, 2, 2, 3, 3]).unwrap();
    assert!(message(run("Conv3D", &c.attrs(), vec![x(), bad])).contains("divisible"));
    // input_sizes of the wrong length, and a gradient of the wrong shape.
    let g = Tensor::zeros(DType::F32, &c.output()).unwrap();
    let m = message(run("Conv3DBackpropInputV2", &c.attrs(), vec![sizes(&[4, 4, 2]), w(), g]));
    assert!(m.contains("5 values"), "{m}");
    let g = Tensor::zeros(DType::F32, &[1, 3, 3, 2, 3]).unwrap();
    let m = message(run("Conv3DBackpropFilterV2", &c.attrs(), vec![x(), sizes(&c.filter), g]));
    assert!(m.contains("out_backprop has shape [1,3,3,2,3]"), "{m}");
}

/// One 3-D pool.
#[derive(Debug, Clone, Copy)]
struct Pool3 {
    input: [usize; 5],
    ksize: [usize; 3],
    strides: [usize; 3],
    padding: &'static str,
}

impl Pool3 {
    fn attrs(&self) -> TestAttrs {
        let s = |v: [usize; 3]| [1, v[0] as i64, v[1] as i64, v[2] as i64, 1];
        TestAttrs::default()
            .ints("ksize", &s(self.ksize))
            .ints("strides", &s(self.strides))
            .string("padding", self.padding)
            .string("data_format", "NDHWC")
    }

    /// The output shape, and for each output element the input indexes of
    /// its window.
    fn windows(&self) -> ([usize; 5], Vec<Vec<usize>>) {
        let [n, id, ih, iw, c] = self.input;
        let [(od, pd), (oh, ph), (ow, pw)] =
            std::array::from_fn(|a| dim(self.input[1 + a], self.ksize[a], self.strides[a], 1, self.padding));
        let mut windows = Vec::new();
        for b in 0..n {
            for (oz, oy, ox) in (0..od).flat_map(|z| (0..oh).flat_map(move |y| (0..ow).map(move |x| (z, y, x)))) {
                for ch in 0..c {
                    let mut w = Vec::new();
                    for z in 0..self.ksize[0] {
                        for y in 0..self.ksize[1] {
                            for x in 0..self.ksize[2] {
                                let iz = (oz * self.strides[0] + z) as i64 - pd as i64;
                                let iy = (oy * self.strides[1] + y) as i64 - ph as i64;
                                let ix = (ox * self.strides[2] + x) as i64 - pw as i64;
                                let inside = |i: i64, len: usize| (0..len as i64).contains(&i);
                                if inside(iz, id) && inside(iy, ih) && inside(ix, iw) {
                                    let (iz, iy, ix) = (iz as usize, iy as usize, ix as usize);
                                    w.push((((b * id + iz) * ih + iy) * iw + ix) * c + ch);
                                }
                            }
                        }
                    }
                    windows.push(w);
                }
            }
        }
        ([n, od, oh, ow, c], windows)
    }

    fn check(&self) {
        let (out, windows) = self.windows();
        // Halves: ties inside windows.
        let x: Vec<f32> = values(self.input.iter().product(), 6).iter().map(|v| (v * 4.0).round() / 2.0).collect();
        let g = values(windows.len(), 7);
        let attrs = self.attrs();
        let max: Vec<f32> = windows.iter().map(|w| w.iter().map(|&i| x[i]).fold(f32::MIN, f32::max)).collect();
        let mean: Vec<f32> =
            windows.iter().map(|w| w.iter().map(|&i| x[i] as f64).sum::<f64>() as f32 / w.len() as f32).collect();
        let y = run("MaxPool3D", &attrs, vec![t(&self.input, &x)]).unwrap();
        assert_eq!(y.shape(), &out, "{self:?}");
        assert_eq!(y.to_vec::<f32>().unwrap(), max, "MaxPool3D {self:?}");
        let y = run("AvgPool3D", &attrs, vec![t(&self.input, &x)]).unwrap();
        for (i, (a, b)) in y.to_vec::<f32>().unwrap().iter().zip(&mean).enumerate() {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "AvgPool3D {self:?}: element {i} is {a}, expected {b}");
        }

        // Every tie for a window's maximum receives that window's gradient.
        let mut dx_max = vec![0f64; x.len()];
        let mut dx_avg = vec![0f64; x.len()];
        for ((w, &m), &g) in windows.iter().zip(&max).zip(&g) {
            for &i in w {
                if x[i] == m {
                    dx_max[i] += g as f64;
                }
                dx_avg[i] += g as f64 / w.len() as f64;
            }
        }
        let dx = run("MaxPool3DGrad", &attrs, vec![t(&self.input, &x), t(&out, &max), t(&out, &g)]).unwrap();
        let dx_avg_got = run("AvgPool3DGrad", &attrs, vec![sizes(&self.input), t(&out, &g)]).unwrap();
        for (op, got, want) in [("MaxPool3DGrad", dx, dx_max), ("AvgPool3DGrad", dx_avg_got, dx_avg)] {
            assert_eq!(got.shape(), &self.input, "{op} {self:?}");
            for (i, (&a, &b)) in got.to_vec::<f32>().unwrap().iter().zip(&want).enumerate() {
                assert!(
                    (a as f64 - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{op} {self:?}: element {i} is {a}, expected {b}"
                );
            }
        }
    }
}

#[test]
fn volume_pooling_matches_reference() {
    let pools = [
        Pool3 { input: [2, 5, 6, 7, 3], ksize: [2, 2, 2], strides: [2, 2, 2], padding: "VALID" },
        Pool3 { input: [2, 5, 6, 7, 3], ksize: [2, 2, 2], strides: [2, 2, 2], padding: "SAME" },
        Pool3 { input: [1, 5, 5, 5, 2], ksize: [3, 3, 3], strides: [1, 1, 1], padding: "SAME" },
        Pool3 { input: [2, 4, 7, 5, 1], ksize: [1, 3, 2], strides: [1, 2, 1], padding: "VALID" },
        Pool3 { input: [1, 1, 1, 1, 1], ksize: [1, 1, 1], strides: [1, 1, 1], padding: "VALID" },
        Pool3 { input: [0, 4, 4, 4, 2], ksize: [2, 2, 2], strides: [2, 2, 2], padding: "VALID" },
        Pool3 { input: [3, 2, 3, 2, 2], ksize: [3, 4, 3], strides: [2, 2, 2], padding: "VALID" },
        // enough work for the pool
        Pool3 { input: [4, 8, 10, 12, 8], ksize: [2, 3, 2], strides: [2, 2, 2], padding: "SAME" },
    ];
    for pool in pools {
        pool.check();
    }
}

#[test]
fn invalid_volume_pooling_is_an_error() {
    let p = Pool3 { input: [1, 4, 4, 4, 2], ksize: [2, 2, 2], strides: [2, 2, 2], padding: "VALID" };
    assert!(build("MaxPool3D", &p.attrs().ints("ksize", &[1, 2, 2, 1])).is_err());
    assert!(build("AvgPool3D", &p.attrs().ints("ksize", &[1, 2, 2, 2, 2])).is_err());
    assert!(build("MaxPool3D", &p.attrs().string("data_format", "NCDHW")).is_err());
    let x = Tensor::zeros(DType::F32, &p.input).unwrap();
    let y = Tensor::zeros(DType::F32, &[1, 2, 2, 2, 2]).unwrap();
    let g = Tensor::zeros(DType::F32, &[1, 2, 2, 3, 2]).unwrap();
    let m = run("MaxPool3DGrad", &p.attrs(), vec![x, y, g]).unwrap_err().to_string();
    assert!(m.contains("MaxPool3DGrad") && m.contains("grad shape"), "{m}");
    let g = Tensor::zeros(DType::F32, &[1, 2, 2, 2, 2]).unwrap();
    let m = run("AvgPool3DGrad", &p.attrs(), vec![sizes(&[1, 4, 4, 2]), g]).unwrap_err().to_string();
    assert!(m.contains("5 elements"), "{m}");
    let m = run("MaxPool3D", &p.attrs(), vec![Tensor::zeros(DType::F32, &[4, 4, 4, 2]).unwrap()]);
    assert!(m.unwrap_err().to_string().contains("5-dimensional"));
}
