//! The pass as the host calls it: bytes and a context in, an answer out.
//! No WIT types here (`tfwasm-pass-sdk` maps them), so the whole path
//! runs natively in tests and benchmarks.

use tfwasm_proto::graph::GraphDef;
use tfwasm_proto::prost::Message;

use crate::fuse::fuse_elementwise;
use crate::node::DT_FLOAT;
use crate::program;
use crate::updates::{self, assign_updates};

pub use tfwasm_pass_sdk::{Answer, Context, Kernel, Rewrite};

/// The pass, as `tfwasm_pass_sdk::export_pass!` exports it.
pub struct FusePass;

impl tfwasm_pass_sdk::Pass for FusePass {
    const NAME: &'static str = "fuse-elementwise";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SUMMARY: &'static str = "float32 variable updates on the device become assignments of a sum, then each \
                                   tree of float32 elementwise ops there becomes one _TfwasmFusedElementwise node";
    type Plan = Plan;

    /// The fused op, and what the update rewrite adds.
    fn emits() -> Vec<&'static str> {
        std::iter::once(program::OP).chain(updates::EMITS).collect()
    }

    fn plan(context: &Context) -> Result<(Plan, Vec<String>), String> {
        Plan::new(context)
    }

    fn optimize(graph: &[u8], context: &Context, plan: Plan) -> Result<Answer, String> {
        optimize(graph, context, plan)
    }
}

/// Which rewrites a call makes, from the policy's options and the kernels
/// the device has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub assign_updates: bool,
    pub fuse: bool,
}

impl Plan {
    /// Reads the options (`assign-updates = "true" | "false"`, default
    /// true) and turns off a rewrite whose ops the device has no kernel
    /// for: the host would refuse its answer. Returns notes for the log
    /// (an unknown option, a rewrite turned off). A malformed value is an
    /// error naming the option.
    pub fn new(context: &Context) -> Result<(Plan, Vec<String>), String> {
        let mut plan = Plan { assign_updates: true, fuse: true };
        let mut notes = Vec::new();
        for (key, value) in &context.options {
            match key.as_str() {
                "assign-updates" => {
                    plan.assign_updates = match value.trim() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("option assign-updates = {value:?} is not true or false")),
                    }
                }
                other => notes.push(format!("ignoring unknown option {other:?}")),
            }
        }
        // Each op a rewrite adds, with the type attributes it sets.
        let has = |op: &str| {
            let attr = if matches!(op, "ReadVariableOp" | "AssignVariableOp") { "dtype" } else { "T" };
            context.has_kernel(op, &[(attr, DT_FLOAT)])
        };
        if !has(program::OP) {
            plan.fuse = false;
            notes.push(format!(
                "the {} device has no float32 kernel for {}: nothing is fused",
                context.device_type,
                program::OP
            ));
        }
        // The sum is only worth its own node when it fuses into the tree.
        if plan.assign_updates {
            let missing: Vec<&str> = updates::EMITS.into_iter().filter(|op| !has(op)).collect();
            if !plan.fuse || !missing.is_empty() {
                plan.assign_updates = false;
                if !missing.is_empty() {
                    notes.push(format!(
                        "the {} device has no float32 kernel for {}: variable updates are left as they are",
                        context.device_type,
                        missing.join(", ")
                    ));
                }
            }
        }
        Ok((plan, notes))
    }
}

/// Runs the pass on `graph` (a serialized GraphDef): the update rewrite,
/// then the fusion, as `plan` allows. Errors when the graph does not decode.
pub fn optimize(graph: &[u8], context: &Context, plan: Plan) -> Result<Answer, String> {
    if !plan.assign_updates && !plan.fuse {
        return Ok(Answer::Unchanged);
    }
    let mut graph = GraphDef::decode(graph).map_err(|e| format!("the graph does not decode: {e}"))?;
    let keep = context.kept();
    let preserve = |name: &str| keep.contains(name);
    let mut report = Vec::new();
    if plan.assign_updates {
        for update in assign_updates(&mut graph, &context.device_type) {
            let reason = format!(
                "float32 {} as an AssignVariableOp of {}(ReadVariableOp, update), which fuses",
                update.was, update.combine
            );
            report.push(Rewrite { node: update.name, reason });
        }
    }
    if plan.fuse {
        for fused in fuse_elementwise(&mut graph, &context.device_type, &preserve) {
            let reason = format!("{} elementwise nodes fused: {}", fused.members, fused.expr);
            report.push(Rewrite { node: fused.name, reason });
        }
    }
    if report.is_empty() {
        return Ok(Answer::Unchanged);
    }
    Ok(Answer::Rewritten { graph: graph.encode_to_vec(), report })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernels(ops: &[&str]) -> Vec<Kernel> {
        let attr = |op: &str| if op.ends_with("VariableOp") { "dtype" } else { "T" };
        ops.iter().map(|op| Kernel { op: op.to_string(), types: vec![(attr(op).into(), vec![1, 2])] }).collect()
    }

    fn context(ops: &[&str], options: &[(&str, &str)]) -> Context {
        Context {
            device_type: "WASM".into(),
            kernels: kernels(ops),
            options: options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    const ALL: &[&str] = &["_TfwasmFusedElementwise", "ReadVariableOp", "AddV2", "Sub", "AssignVariableOp"];

    #[test]
    fn the_plan_follows_the_options_and_the_kernels() {
        let (plan, notes) = Plan::new(&context(ALL, &[])).unwrap();
        assert_eq!((plan, notes.len()), (Plan { assign_updates: true, fuse: true }, 0));
        let (plan, notes) = Plan::new(&context(ALL, &[("assign-updates", "false"), ("speed", "max")])).unwrap();
        assert_eq!(plan, Plan { assign_updates: false, fuse: true });
        assert_eq!(notes, ["ignoring unknown option \"speed\""]);
        assert!(Plan::new(&context(ALL, &[("assign-updates", "yes")])).unwrap_err().contains("assign-updates"));

        let (plan, notes) = Plan::new(&context(&ALL[1..], &[])).unwrap();
        assert_eq!(plan, Plan { assign_updates: false, fuse: false });
        assert!(notes[0].contains("nothing is fused"), "{notes:?}");
        let (plan, notes) = Plan::new(&context(&ALL[..4], &[])).unwrap();
        assert_eq!(plan, Plan { assign_updates: false, fuse: true });
        assert!(notes[0].contains("AssignVariableOp"), "{notes:?}");
        // A kernel without type constraint serves float32, and so does one
        // constraining an attribute the node does not set; one for int32 does not.
        let mut untyped = context(ALL, &[]);
        untyped.kernels[0].types.clear();
        untyped.kernels[2].types[0].0 = "Tidx".into();
        assert_eq!(Plan::new(&untyped).unwrap().0, Plan { assign_updates: true, fuse: true });
        untyped.kernels[1].types[0].1 = vec![3];
        let (plan, _) = Plan::new(&untyped).unwrap();
        assert_eq!(plan, Plan { assign_updates: false, fuse: true });
    }

    #[test]
    fn garbage_is_an_error_and_nothing_to_do_is_unchanged() {
        let (plan, _) = Plan::new(&context(ALL, &[])).unwrap();
        assert!(optimize(&[0x0a, 0x05, 1], &context(ALL, &[]), plan).unwrap_err().contains("does not decode"));
        assert_eq!(optimize(&[], &context(ALL, &[]), plan), Ok(Answer::Unchanged));
    }

    #[test]
    fn emits_names_every_op_the_rewrites_add() {
        assert_eq!(<FusePass as tfwasm_pass_sdk::Pass>::emits(), ALL);
    }
}
