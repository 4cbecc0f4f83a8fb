//! Float32 `Einsum` with one or two operands, as Keras' `EinsumDense` and
//! `MultiHeadAttention` (and their gradients) emit it.
//!
//! An [`Equation`] is parsed once per node. Each execution makes a
//! [`EinsumPlan`] from the operand shapes, in three steps:
//!
//! 1. Every operand becomes a strided [`View`] over its distinct labels: a
//!    label repeated inside one operand (`ii`) is its diagonal (the label's
//!    step is the sum of the repeated axes' strides), and a broadcast
//!    ellipsis dimension of size 1 against a larger one is dropped.
//! 2. Labels only one operand has and the output lacks are summed out of
//!    that operand first.
//! 3. With two operands the rest is one batched product: labels both
//!    operands and the output have are its batch, labels both operands have
//!    and the output lacks are contracted, and the others are the rows (first
//!    operand) and columns (second). Each operand is gathered into that
//!    layout unless it already is in it, possibly transposed, and the product
//!    ([`BatchMatMulPlan`], on `gemm`) lands in the output directly when the
//!    output's label order allows.
//!
//! A label the output repeats (`i->ii`) fills a diagonal of an otherwise
//! zero output. Shapes follow TensorFlow's rules: a named label has one size
//! everywhere, ellipsis dimensions broadcast, and ellipsis dimensions need an
//! ellipsis in the output.

use super::matmul::{BatchMatMulPlan, MatMulAttrs};
use super::movement::{strides_of, View};
use super::reduce::ReducePlan;
use super::shape::{element_count, ShapeDisplay};
use super::{types, Attrs, Kernel, KernelDef, OpContext};
use crate::error::Error;
use std::borrow::Cow;

pub const KERNELS: &[KernelDef] = &[KernelDef::new("Einsum", types::T_F32, build)];

fn build(attrs: &dyn Attrs) -> Result<Box<dyn Kernel>, Error> {
    Ok(Box::new(Equation::parse(&attrs.string("equation")?)?))
}

fn invalid(message: String) -> Error {
    Error::InvalidArgument(format!("Einsum: {message}"))
}

/// One position of a subscript term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscript {
    Label(u8),
    Ellipsis,
}

/// A parsed equation such as `abc,cd->abd` or `...ij,...jk->...ik`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equation {
    text: String,
    inputs: Vec<Vec<Subscript>>,
    output: Vec<Subscript>,
}

/// Labels are ids: a letter is its byte (< 128); ellipsis dimension `j`
/// (counted from the left of the widest ellipsis) is `ELLIPSIS + j`.
type Label = usize;
const ELLIPSIS: Label = 128;

impl Equation {
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |why: &str| invalid(format!("{why} in equation \"{text}\""));
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let mut sides = compact.split("->");
        let (Some(lhs), Some(rhs), None) = (sides.next(), sides.next(), sides.next()) else {
            return Err(bad("expected exactly one '->'"));
        };
        let term = |s: &str| -> Result<Vec<Subscript>, Error> {
            let mut out = Vec::with_capacity(s.len());
            let mut rest = s;
            while !rest.is_empty() {
                if let Some(after) = rest.strip_prefix("...") {
                    if out.contains(&Subscript::Ellipsis) {
                        return Err(bad(&format!("more than one ellipsis in the term \"{s}\"")));
                    }
                    out.push(Subscript::Ellipsis);
                    rest = after;
                    continue;
                }
                let c = rest.as_bytes()[0];
                if !c.is_ascii_alphabetic() {
                    let shown = rest.chars().next().unwrap_or('?');
                    return Err(bad(&format!("invalid character '{shown}' (labels are letters, or '...')")));
                }
                out.push(Subscript::Label(c));
                rest = &rest[1..];
            }
            Ok(out)
        };
        let inputs = lhs.split(',').map(term).collect::<Result<Vec<_>, _>>()?;
        if !(1..=2).contains(&inputs.len()) {
            return Err(bad(&format!("{} operands (Einsum takes one or two)", inputs.len())));
        }
        let output = term(rhs)?;
        for s in &output {
            if let Subscript::Label(c) = s {
                if !inputs.iter().flatten().any(|t| t == s) {
                    return Err(bad(&format!("output label '{}' is in no input", *c as char)));
                }
            }
        }
        Ok(Equation { text: text.to_owned(), inputs, output })
    }
}

impl Kernel for Equation {
    fn compute(&self, ctx: &dyn OpContext) -> Result<(), Error> {
        let count = ctx.num_inputs();
        if count != self.inputs.len() {
            return Err(invalid(format!(
                "equation \"{}\" has {} operands, TensorFlow passed {count}",
                self.text,
                self.inputs.len()
            )));
        }
        let inputs = (0..count).map(|i| ctx.input(i)).collect::<Result<Vec<_>, _>>()?;
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
        let plan = EinsumPlan::new(self, &shapes)?;
        let mut out = ctx.allocate_output(0, &plan.output_shape)?;
        let data = inputs.iter().map(|t| t.data::<f32>()).collect::<Result<Vec<_>, _>>()?;
        plan.run(&data, out.data_mut()?)
    }
}

/// One operand as seen by the plan: its distinct labels, each with its size
/// in this operand and its step through the operand's buffer.
#[derive(Debug, Clone)]
struct Operand {
    labels: Vec<(Label, usize, isize)>,
    len: usize,
}

impl Operand {
    fn has(&self, label: Label) -> bool {
        self.labels.iter().any(|&(l, _, _)| l == label)
    }

    /// The view that walks this operand in label order `order`. A label it
    /// lacks is a broadcast dimension of size 1.
    fn view(&self, order: &[Label]) -> View {
        let (dims, steps): (Vec<usize>, Vec<isize>) = order
            .iter()
            .map(|l| self.labels.iter().find(|(x, _, _)| x == l).map_or((1, 0), |&(_, size, step)| (size, step)))
            .unzip();
        View::new(0, &dims, &steps)
    }

    fn sizes(&self, order: &[Label]) -> Vec<usize> {
        order.iter().map(|l| self.labels.iter().find(|(x, _, _)| x == l).map_or(1, |&(_, s, _)| s)).collect()
    }

    /// This operand's values in label order `keep`, with the labels `sum`
    /// summed out. Borrows `data` when that is already the layout.
    fn arrange<'a>(&self, data: &'a [f32], keep: &[Label], sum: &[Label]) -> Result<Cow<'a, [f32]>, Error> {
        let order: Vec<Label> = keep.iter().chain(sum).copied().collect();
        let view = self.view(&order);
        let shape = self.sizes(&order);
        let gathered = if view.is_whole(data.len()) {
            Cow::Borrowed(data)
        } else {
            let mut buf = vec![0.0f32; shape.iter().product()];
            view.gather(data, &mut buf)?;
            Cow::Owned(buf)
        };
        if sum.is_empty() {
            return Ok(gathered);
        }
        let axes: Vec<i64> = (keep.len()..order.len()).map(|a| a as i64).collect();
        let reduce = ReducePlan::new("Einsum", &shape, &axes, false)?;
        let mut out = vec![0.0f32; reduce.output_len()];
        reduce.sum(&gathered, &mut out)?;
        Ok(Cow::Owned(out))
    }
}

/// How the labels of a two-operand equation map onto one batched product.
#[derive(Debug, Clone)]
struct Product {
    batch: Vec<Label>,
    rows: Vec<Label>,
    contracted: Vec<Label>,
    cols: Vec<Label>,
    /// Labels summed out of each operand before the product.
    sum: [Vec<Label>; 2],
}

/// A checked `Einsum` for given operand shapes.
#[derive(Debug, Clone)]
pub struct EinsumPlan {
    operands: Vec<Operand>,
    output_shape: Vec<usize>,
    /// The output's labels, one per output dimension (repeats possible).
    output: Vec<Label>,
    /// The output's distinct labels, in first-occurrence order.
    distinct: Vec<Label>,
    product: Option<Product>,
}

impl EinsumPlan {
    pub fn new(equation: &Equation, shapes: &[&[usize]]) -> Result<Self, Error> {
        if shapes.len() != equation.inputs.len() {
            return Err(invalid(format!(
                "equation \"{}\" has {} operands, got {}",
                equation.text,
                equation.inputs.len(),
                shapes.len()
            )));
        }
        // Ellipsis widths, right-aligned against the widest.
        let mut widths = Vec::with_capacity(shapes.len());
        for (i, (term, shape)) in equation.inputs.iter().zip(shapes).enumerate() {
            let named = term.iter().filter(|s| **s != Subscript::Ellipsis).count();
            let has_ellipsis = term.len() != named;
            if shape.len() < named || (!has_ellipsis && shape.len() != named) {
                return Err(invalid(format!(
                    "input {i} has shape {} but its subscripts in \"{}\" name {named} dimension(s)",
                    ShapeDisplay(shape),
                    equation.text
                )));
            }
            widths.push(shape.len() - named);
        }
        let width = widths.iter().copied().max().unwrap_or(0);
        if width > 0 && !equation.output.contains(&Subscript::Ellipsis) && widths.iter().any(|&w| w > 0) {
            return Err(invalid(format!(
                "the inputs have {width} broadcast dimension(s) but the output subscripts of \"{}\" have no '...'",
                equation.text
            )));
        }

        // Each axis's label, and each label's size (named labels must agree,
        // ellipsis dimensions broadcast).
        let mut size: Vec<Option<usize>> = vec![None; ELLIPSIS + width];
        let mut axis_labels: Vec<Vec<Label>> = Vec::with_capacity(shapes.len());
        for (i, (term, shape)) in equation.inputs.iter().zip(shapes).enumerate() {
            let mut labels = Vec::with_capacity(shape.len());
            for s in term {
                match *s {
                    Subscript::Label(c) => labels.push(c as Label),
                    Subscript::Ellipsis => labels.extend((width - widths[i]..width).map(|j| ELLIPSIS + j)),
                }
            }
            for (axis, (&label, &dim)) in labels.iter().zip(shape.iter()).enumerate() {
                let known = &mut size[label];
                match *known {
                    None => *known = Some(dim),
                    Some(seen) if seen == dim => {}
                    Some(seen) if label >= ELLIPSIS && (seen == 1 || dim == 1) => *known = Some(seen.max(dim)),
                    Some(seen) => {
                        let what = if label < ELLIPSIS {
                            format!("label '{}'", label as u8 as char)
                        } else {
                            "that broadcast dimension".to_owned()
                        };
                        return Err(invalid(format!(
                            "dimension {axis} of input {i} (shape {}) is {dim}, but {what} is {seen} elsewhere in \"{}\"",
                            ShapeDisplay(shape),
                            equation.text
                        )));
                    }
                }
            }
            axis_labels.push(labels);
        }

        let mut output = Vec::new();
        for s in &equation.output {
            match *s {
                Subscript::Label(c) => output.push(c as Label),
                Subscript::Ellipsis => output.extend((0..width).map(|j| ELLIPSIS + j)),
            }
        }
        let output_shape: Vec<usize> = output.iter().map(|&l| size[l].unwrap_or(1)).collect();
        element_count(&output_shape)
            .filter(|&n| isize::try_from(n).is_ok())
            .ok_or_else(|| invalid(format!("output shape {} is too large", ShapeDisplay(&output_shape))))?;
        let mut distinct: Vec<Label> = Vec::with_capacity(output.len());
        for &l in &output {
            if !distinct.contains(&l) {
                distinct.push(l);
            }
        }

        let operands: Vec<Operand> = axis_labels
            .iter()
            .zip(shapes)
            .map(|(labels, shape)| {
                let strides = strides_of(shape);
                let mut distinct: Vec<(Label, usize, isize)> = Vec::with_capacity(labels.len());
                for ((&label, &dim), &stride) in labels.iter().zip(shape.iter()).zip(&strides) {
                    match distinct.iter_mut().find(|(l, _, _)| *l == label) {
                        // A repeated label walks the diagonal.
                        Some(entry) => entry.2 += stride as isize,
                        None => distinct.push((label, dim, stride as isize)),
                    }
                }
                // A size-1 dimension broadcast against a larger one takes no part.
                distinct.retain(|&(label, dim, _)| !(dim == 1 && size[label].unwrap_or(1) > 1));
                Operand { labels: distinct, len: shape.iter().product() }
            })
            .collect();

        let product = match operands.as_slice() {
            [_] => None,
            [a, b] => {
                let in_output = |l: Label| output.contains(&l);
                let of = |op: &Operand, f: &dyn Fn(Label) -> bool| -> Vec<Label> {
                    op.labels.iter().map(|&(l, _, _)| l).filter(|&l| f(l)).collect()
                };
                Some(Product {
                    batch: of(a, &|l| b.has(l) && in_output(l)),
                    rows: of(a, &|l| !b.has(l) && in_output(l)),
                    contracted: of(a, &|l| b.has(l) && !in_output(l)),
                    cols: of(b, &|l| !a.has(l) && in_output(l)),
                    sum: [of(a, &|l| !b.has(l) && !in_output(l)), of(b, &|l| !a.has(l) && !in_output(l))],
                })
            }
            _ => unreachable!("parse admits one or two operands"),
        };
        Ok(EinsumPlan { operands, output_shape, output, distinct, product })
    }

    pub fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }

    /// Computes the equation over `inputs` (row-major, the planned shapes).
    pub fn run(&self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), Error> {
        let lens_fit = inputs.len() == self.operands.len()
            && inputs.iter().zip(&self.operands).all(|(data, op)| data.len() == op.len)
            && out.len() == self.output_shape.iter().product::<usize>();
        if !lens_fit {
            return Err(Error::Internal("Einsum: buffers do not fit the planned shapes".into()));
        }
        if out.is_empty() {
            return Ok(());
        }
        let repeats = self.distinct.len() != self.output.len();
        let Some(p) = &self.product else {
            // One operand: a transpose, diagonal or sum of it.
            let a = &self.operands[0];
            let sum: Vec<Label> = a.labels.iter().map(|&(l, _, _)| l).filter(|l| !self.output.contains(l)).collect();
            let values = a.arrange(inputs[0], &self.distinct, &sum)?;
            if repeats {
                return self.inflate(&values, out);
            }
            out.copy_from_slice(&values);
            return Ok(());
        };

        let (a, b) = (&self.operands[0], &self.operands[1]);
        // Each operand in the product's layout, or transposed, whichever it
        // already is; otherwise gathered (and summed) into the plain one.
        let a_plain = [&p.batch[..], &p.rows, &p.contracted].concat();
        let a_trans = [&p.batch[..], &p.contracted, &p.rows].concat();
        let b_plain = [&p.batch[..], &p.contracted, &p.cols].concat();
        let b_trans = [&p.batch[..], &p.cols, &p.contracted].concat();
        let transposed = |op: &Operand, data: &[f32], sum: &[Label], plain: &[Label], trans: &[Label]| {
            sum.is_empty() && !op.view(plain).is_whole(data.len()) && op.view(trans).is_whole(data.len())
        };
        let transpose_a = transposed(a, inputs[0], &p.sum[0], &a_plain, &a_trans);
        let transpose_b = transposed(b, inputs[1], &p.sum[1], &b_plain, &b_trans);
        let a_data = a.arrange(inputs[0], if transpose_a { &a_trans } else { &a_plain }, &p.sum[0])?;
        let b_data = b.arrange(inputs[1], if transpose_b { &b_trans } else { &b_plain }, &p.sum[1])?;

        let extent = |op: &Operand, labels: &[Label]| op.sizes(labels).iter().product::<usize>();
        let (batch, m, k, n) = (extent(a, &p.batch), extent(a, &p.rows), extent(a, &p.contracted), extent(b, &p.cols));
        let a_shape = if transpose_a { [batch, k, m] } else { [batch, m, k] };
        let b_shape = if transpose_b { [batch, n, k] } else { [batch, k, n] };
        let matmul = BatchMatMulPlan::new(MatMulAttrs { transpose_a, transpose_b }, &a_shape, &b_shape)?;

        // The product's labels, in its output order.
        let product_order = [&p.batch[..], &p.rows, &p.cols].concat();
        if !repeats && product_order == self.output {
            return matmul.run(&a_data, &b_data, out);
        }
        let mut product = vec![0.0f32; batch * m * n];
        matmul.run(&a_data, &b_data, &mut product)?;
        let sizes: Vec<usize> = product_order.iter().map(|&l| self.size_of(l)).collect();
        let strides = strides_of(&sizes);
        let step = |l: &Label| product_order.iter().position(|x| x == l).map_or(0, |i| strides[i] as isize);
        let dims: Vec<usize> = self.distinct.iter().map(|&l| self.size_of(l)).collect();
        let steps: Vec<isize> = self.distinct.iter().map(step).collect();
        if repeats {
            let mut values = vec![0.0f32; dims.iter().product()];
            View::new(0, &dims, &steps).gather(&product, &mut values)?;
            self.inflate(&values, out)
        } else {
            View::new(0, &dims, &steps).gather(&product, out)
        }
    }

    fn size_of(&self, label: Label) -> usize {
        self.output.iter().zip(&self.output_shape).find(|(l, _)| **l == label).map_or(1, |(_, &s)| s)
    }

    /// Writes `values` (over the output's distinct labels) onto the output's
    /// diagonals for repeated labels; everything else is zero.
    fn inflate(&self, values: &[f32], out: &mut [f32]) -> Result<(), Error> {
        let strides = strides_of(&self.output_shape);
        let dims: Vec<usize> = self.distinct.iter().map(|&l| self.size_of(l)).collect();
        let steps: Vec<isize> = self
            .distinct
            .iter()
            .map(|&l| self.output.iter().zip(&strides).filter(|(x, _)| **x == l).map(|(_, &s)| s as isize).sum())
            .collect();
        out.fill(0.0);
        View::new(0, &dims, &steps).scatter(values, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, LocalContext, Tensor};

    /// A deterministic pseudo-random fill.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The equation evaluated by its definition: every combination of
    /// every label's index, in f64.
    fn reference(equation: &str, shapes: &[&[usize]], inputs: &[Vec<f32>]) -> (Vec<usize>, Vec<f32>) {
        let (lhs, rhs) = equation.split_once("->").unwrap();
        let terms: Vec<&str> = lhs.split(',').collect();
        // Expand ellipses into upper-case-free placeholder digits, right-aligned.
        let width = terms
            .iter()
            .zip(shapes)
            .map(|(t, s)| if t.contains("...") { s.len() - (t.len() - 3) } else { 0 })
            .max()
            .unwrap();
        let ell: String = (0..width).map(|j| (b'0' + j as u8) as char).collect();
        let expand = |t: &str, rank: usize| -> Vec<char> {
            if let Some((l, r)) = t.split_once("...") {
                let w = rank - l.len() - r.len();
                format!("{l}{}{r}", &ell[width - w..]).chars().collect()
            } else {
                t.chars().collect()
            }
        };
        let terms: Vec<Vec<char>> = terms.iter().zip(shapes).map(|(t, s)| expand(t, s.len())).collect();
        let out_term: Vec<char> = rhs.replace("...", &ell).chars().collect();
        let mut size = std::collections::BTreeMap::new();
        for (t, s) in terms.iter().zip(shapes) {
            for (c, &d) in t.iter().zip(s.iter()) {
                let e = size.entry(*c).or_insert(d);
                *e = (*e).max(d);
            }
        }
        let labels: Vec<char> = size.keys().copied().collect();
        let out_shape: Vec<usize> = out_term.iter().map(|c| size[c]).collect();
        let mut out = vec![0.0f64; out_shape.iter().product()];
        let total: usize = labels.iter().map(|c| size[c]).product();
        for flat in 0..total {
            let mut rest = flat;
            let mut index = std::collections::BTreeMap::new();
            for c in labels.iter().rev() {
                index.insert(*c, rest % size[c]);
                rest /= size[c];
            }
            let offset = |t: &[char], shape: &[usize]| -> usize {
                t.iter().zip(shape).fold(0, |acc, (c, &d)| acc * d + if d == 1 { 0 } else { index[c] })
            };
            // Output positions: a repeated output label only where equal.
            let mut o = 0;
            for (c, &d) in out_term.iter().zip(&out_shape) {
                o = o * d + index[c];
            }
            let mut v = 1.0f64;
            for ((t, s), x) in terms.iter().zip(shapes).zip(inputs) {
                // A repeated input label is its diagonal: the index map gives one index per label.
                v *= x[offset(t, s)] as f64;
            }
            out[o] += v;
        }
        (out_shape, out.into_iter().map(|v| v as f32).collect())
    }

    fn run(equation: &str, shapes: &[&[usize]]) -> Result<(Vec<usize>, Vec<f32>), Error> {
        let inputs: Vec<Vec<f32>> =
            shapes.iter().enumerate().map(|(i, s)| values(s.iter().product(), i as u64 + 7)).collect();
        let tensors = inputs.iter().zip(shapes).map(|(v, s)| Tensor::from_vec(s, v.clone()).unwrap()).collect();
        let kernel = Equation::parse(equation)?;
        let out = LocalContext::run(&kernel, tensors, &[DType::F32])?.remove(0);
        let (shape, expected) = reference(equation, shapes, &inputs);
        assert_eq!(out.shape(), shape.as_slice(), "{equation} {shapes:?}");
        let got = out.data::<f32>().unwrap();
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{equation} {shapes:?}: element {i}: {g} vs {e}");
        }
        Ok((shape, got.to_vec()))
    }

    #[test]
    fn matches_the_definition() {
        let cases: &[(&str, &[&[usize]])] = &[
            ("ab,bc->ac", &[&[2, 3], &[3, 4]]),
            ("ab,cb->ac", &[&[5, 7], &[3, 7]]),
            ("ba,bc->ac", &[&[7, 5], &[7, 3]]),
            ("abc,cde->abde", &[&[2, 3, 5], &[5, 4, 3]]),
            ("aecd,abcd->acbe", &[&[2, 5, 3, 4], &[2, 7, 3, 4]]),
            ("acbe,aecd->abcd", &[&[2, 3, 7, 5], &[2, 5, 3, 4]]),
            ("abde,cde->abc", &[&[2, 3, 4, 5], &[7, 4, 5]]),
            ("abc,abd->cd", &[&[3, 2, 5], &[3, 2, 4]]),
            ("...ab,bc->...ac", &[&[5, 2, 3], &[3, 4]]),
            ("...ab,...bc->...ac", &[&[5, 1, 2, 3], &[7, 3, 4]]),
            ("a...,b...->ab...", &[&[2, 3], &[4, 1]]),
            ("...,...->...", &[&[2, 3], &[3]]),
            ("ab,cd->abcd", &[&[2, 3], &[4, 5]]),
            ("ab,bc->a", &[&[2, 3], &[3, 4]]),
            ("ab,bc->ca", &[&[1, 1], &[1, 1]]),
            ("iij,jk->ik", &[&[3, 3, 2], &[2, 4]]),
            ("ij,ij->ij", &[&[3, 5], &[3, 5]]),
            ("ij,ij->", &[&[3, 5], &[3, 5]]),
            ("ab->ba", &[&[3, 5]]),
            ("ab->", &[&[3, 5]]),
            ("ii->i", &[&[4, 4]]),
            ("i->ii", &[&[3]]),
            ("ab,b->aab", &[&[3, 2], &[2]]),
            ("abc->cb", &[&[2, 3, 4]]),
            ("ab,b->a", &[&[2, 0], &[0]]),
            ("abc,abd->acd", &[&[0, 2, 3], &[0, 2, 4]]),
            ("ab,bc->ac", &[&[0, 3], &[3, 4]]),
        ];
        for (equation, shapes) in cases {
            run(equation, shapes).unwrap_or_else(|e| panic!("{equation} {shapes:?}: {e}"));
        }
    }

    #[test]
    fn an_empty_contraction_is_zeros() {
        let (shape, values) = run("ab,bc->ac", &[&[2, 0], &[0, 3]]).unwrap();
        assert_eq!(shape, [2, 3]);
        assert!(values.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_large_product_uses_the_pool_and_matches() {
        run("abc,cd->abd", &[&[4, 64, 96], &[96, 80]]).unwrap();
        run("aecd,abcd->acbe", &[&[2, 33, 4, 16], &[2, 31, 4, 16]]).unwrap();
    }

    #[test]
    fn bad_equations_and_shapes_are_errors_naming_einsum() {
        for (equation, why) in [
            ("ab,bc", "exactly one '->'"),
            ("ab,bc->ac->a", "exactly one '->'"),
            ("a1,bc->ac", "invalid character '1'"),
            ("a...b...,b->a", "more than one ellipsis"),
            ("a....,b->a", "invalid character '.'"),
            ("ab,bc,cd->ad", "3 operands"),
            ("ab,bc->az", "output label 'z' is in no input"),
        ] {
            let error = Equation::parse(equation).unwrap_err().to_string();
            assert!(error.contains("Einsum") && error.contains(why), "{equation}: {error}");
        }
        for (equation, shapes, why) in [
            ("ab,bc->ac", &[&[2, 3][..], &[4, 5]][..], "label 'b' is 3 elsewhere"),
            ("ab,bc->ac", &[&[2, 1], &[3, 4]], "label 'b' is 1 elsewhere"),
            ("ab,bc->ac", &[&[2, 3, 1], &[3, 4]], "name 2 dimension(s)"),
            ("...ab,...bc->ac", &[&[5, 2, 3], &[5, 3, 4]], "no '...'"),
            ("...ab,...bc->...ac", &[&[5, 2, 3], &[4, 3, 4]], "broadcast dimension is 5 elsewhere"),
        ] {
            let error = run(equation, shapes).unwrap_err().to_string();
            assert!(error.contains("Einsum") && error.contains(why), "{equation} {shapes:?}: {error}");
        }
    }

    #[test]
    fn operands_already_in_product_layout_are_not_copied() {
        // Both operands plain or transposed for the product: no gather.
        let eq = Equation::parse("abc,acd->abd").unwrap();
        let plan = EinsumPlan::new(&eq, &[&[2, 3, 4], &[2, 4, 5]]).unwrap();
        let p = plan.product.as_ref().unwrap();
        let a_plain = [&p.batch[..], &p.rows, &p.contracted].concat();
        assert!(plan.operands[0].view(&a_plain).is_whole(24));
        let eq = Equation::parse("acb,adc->abd").unwrap();
        let plan = EinsumPlan::new(&eq, &[&[2, 4, 3], &[2, 5, 4]]).unwrap();
        let p = plan.product.as_ref().unwrap();
        let a_trans = [&p.batch[..], &p.contracted, &p.rows].concat();
        let b_trans = [&p.batch[..], &p.cols, &p.contracted].concat();
        assert!(plan.operands[0].view(&a_trans).is_whole(24));
        assert!(plan.operands[1].view(&b_trans).is_whole(40));
    }
}
