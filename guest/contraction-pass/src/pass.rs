//! The pass as the host calls it: bytes and a context in, an answer out.
//! No WIT types here (`tfwasm-pass-sdk` maps them), so the whole path
//! runs natively in tests.

use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;

use crate::contraction::{fuse_contractions, Product, Rules, ACTIVATIONS};
use crate::node::DT_FLOAT;

/// The activations the device's fused kernels implement after a bias
/// (`host/kernels/src/epilogue.rs`, `FusedOps::parse`): the default of
/// the `activations` option. The kernel list cannot say which `fused_ops`
/// a kernel accepts, so the pass has to know.
pub const DEVICE_ACTIVATIONS: &[&str] = &["Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid"];

pub use tfwasm_pass_sdk::{Answer, Context, Kernel, Rewrite};

/// The pass, as `tfwasm_pass_sdk::export_pass!` exports it.
pub struct ContractionPass;

impl tfwasm_pass_sdk::Pass for ContractionPass {
    const NAME: &'static str = "fuse-contraction";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SUMMARY: &'static str = "float32 MatMul or NHWC Conv2D, BiasAdd and an activation on the device become \
                                   one _FusedMatMul or _FusedConv2D node; run it before fuse-elementwise";
    type Plan = Plan;

    /// The fused ops, one per product.
    fn emits() -> Vec<&'static str> {
        Product::ALL.into_iter().map(Product::fused_op).collect()
    }

    fn plan(context: &Context) -> Result<(Plan, Vec<String>), String> {
        Plan::new(context)
    }

    fn optimize(graph: &[u8], context: &Context, plan: Plan) -> Result<Answer, String> {
        optimize(graph, context, &plan)
    }
}

/// What a call fuses, from the policy's options and the device's kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub products: Vec<Product>,
    /// Op names of the activations a chain may end with.
    pub activations: Vec<&'static str>,
}

impl Plan {
    /// Reads the options and leaves out a product whose fused op the device
    /// has no float32 kernel for (the host would refuse the answer):
    ///
    /// - `activations = "Relu, Tanh"`: the activations to fuse after the
    ///   bias, of Relu, Relu6, Elu, LeakyRelu, Tanh, Sigmoid; `""` for
    ///   none (only the bias fuses). Default: all six, what the device's
    ///   kernels implement.
    /// - `matmul = "false"`, `conv2d = "false"`: leave that product alone.
    ///
    /// Returns notes for the log (an unknown option, a product left out). A
    /// malformed value is an error naming the option.
    pub fn new(context: &Context) -> Result<(Plan, Vec<String>), String> {
        let mut products = Product::ALL.to_vec();
        let mut activations = DEVICE_ACTIVATIONS.to_vec();
        let mut notes = Vec::new();
        for (key, value) in &context.options {
            match key.as_str() {
                "activations" => {
                    activations = Vec::new();
                    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                        let Some((known, _)) = ACTIVATIONS.iter().find(|(op, _)| *op == name) else {
                            let known: Vec<&str> = ACTIVATIONS.iter().map(|(op, _)| *op).collect();
                            return Err(format!(
                                "option activations: {name:?} is not an activation the fused ops take ({})",
                                known.join(", ")
                            ));
                        };
                        if !activations.contains(known) {
                            activations.push(known);
                        }
                    }
                }
                "matmul" | "conv2d" => {
                    let on = match value.trim() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("option {key} = {value:?} is not true or false")),
                    };
                    let product = if key == "matmul" { Product::MatMul } else { Product::Conv2D };
                    if !on {
                        products.retain(|p| *p != product);
                    }
                }
                other => notes.push(format!("ignoring unknown option {other:?}")),
            }
        }
        products.retain(|&product| {
            let op = product.fused_op();
            let has = context.has_kernel(op, &[("T", DT_FLOAT), ("TArgs", DT_FLOAT)]);
            if !has {
                notes.push(format!(
                    "the {} device has no float32 kernel for {op}: {} chains are not fused",
                    context.device_type,
                    product.op()
                ));
            }
            has
        });
        Ok((Plan { products, activations }, notes))
    }
}

/// Runs the pass on `graph` (a serialized GraphDef) as `plan` allows.
/// Errors when the graph does not decode.
pub fn optimize(graph: &[u8], context: &Context, plan: &Plan) -> Result<Answer, String> {
    if plan.products.is_empty() {
        return Ok(Answer::Unchanged);
    }
    let mut graph = GraphDef::decode(graph).map_err(|e| format!("the graph does not decode: {e}"))?;
    let keep = context.kept();
    let keep = |name: &str| keep.contains(name);
    let rules = Rules {
        device_type: &context.device_type,
        products: &plan.products,
        activations: &plan.activations,
        keep: &keep,
    };
    let report: Vec<Rewrite> = fuse_contractions(&mut graph, &rules)
        .into_iter()
        .map(|fused| {
            let chain: Vec<&str> = fused.chain.iter().map(|(_, op)| op.as_str()).collect();
            let reason = format!("float32 {} as one {} [{}]", chain.join(" + "), fused.op, fused.fused_ops.join(", "));
            Rewrite { node: fused.name, reason }
        })
        .collect();
    if report.is_empty() {
        return Ok(Answer::Unchanged);
    }
    Ok(Answer::Rewritten { graph: graph.encode_to_vec(), report })
}
