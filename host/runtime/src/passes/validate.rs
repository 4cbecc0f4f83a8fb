//! The checks every answer of a pass passes before TensorFlow sees it.
//!
//! A pass is untrusted code that answers with untrusted bytes. TensorFlow
//! takes back whatever graph the optimizer returns, and a graph it cannot
//! run fails the user's step (or, for some mistakes, aborts the process). So
//! the host checks the answer against what it gave the pass: the bytes
//! parse; node names are unique; every input names a node and an output that
//! node's op has; every op is one TensorFlow knows or a function of the
//! graph's library; the nodes TensorFlow asked to keep are there with the
//! same outputs; no cycle appears that the given graph did not have (a
//! loop's back edge, out of `NextIteration`, is not one); the answer is not
//! much larger than the graph (the pass's `max-growth`), keeps the graph's
//! versions and function library; and each node the pass added or changed
//! is placed on a device that exists in this process (a device TensorFlow
//! cannot find makes it crash partitioning the function), keeps a
//! function's arguments and results where they were, leaves XLA off on
//! the device, has attributes its op defines, an op the pass declared it may
//! emit (when the op is new to the graph), inputs of the count and types
//! its op takes, resources on its own device (see [`super::types`]), and,
//! when placed on the device, a kernel there.
//!
//! Each of these is something TensorFlow 2.21 was seen to do with an answer
//! that lacked it: crash, fail the step, or (for a type mismatch) run the
//! function unoptimized, dropping every other pass's rewrite with it.
//!
//! What TensorFlow knows is behind [`OpCatalog`]: in the plugin,
//! TensorFlow's own op registry and the device's kernel table; offline, a
//! snapshot of the registry.

use std::collections::{HashMap, HashSet};

use tfwasm_proto::graph::{attr_value, GraphDef, NodeDef, OpDef};
use tfwasm_proto::prost::Message;

use super::types::{self, Signature};

/// What the host knows about ops and kernels.
pub trait OpCatalog {
    /// TensorFlow's definition of op type `op`, or `None` when TensorFlow
    /// has no such op.
    fn op_def(&self, op: &str) -> Option<OpDef>;

    /// Whether the device has a kernel for `node`'s op and type attributes.
    fn has_kernel(&self, node: &NodeDef) -> bool;
}

/// What the host expects of an answer besides the catalog's facts.
pub struct Expectations<'a> {
    /// The device type the pass optimizes for, e.g. `WASM`.
    pub device_type: &'a str,
    /// Nodes TensorFlow asked to keep, with their outputs.
    pub preserve: &'a [String],
    /// Op types the pass declared it may add (`pass-info.emits`).
    pub emits: &'a [String],
    /// How many devices of `device_type` this process has: a node may be
    /// placed on one of them or on a device the given graph uses, no other.
    pub device_count: usize,
    /// How much larger than the given graph an answer may be, in bytes and
    /// in nodes (beyond a fixed allowance for small graphs).
    pub max_growth: f64,
}

impl Expectations<'_> {
    /// Nodes an answer may add beyond `max_growth` times the given count.
    pub const NODE_ALLOWANCE: usize = 256;
    /// Bytes an answer may add beyond `max_growth` times the given size.
    pub const BYTE_ALLOWANCE: usize = 64 << 10;
}

/// Why an answer was refused. Each names the node at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the answer is not a GraphDef: {0}")]
    Unparseable(String),
    #[error("two nodes are named `{0}`")]
    DuplicateName(String),
    #[error("node `{node}` has an input `{input}` that names no node of the graph")]
    DanglingInput { node: String, input: String },
    #[error("node `{node}` reads output {port} of `{of}`, which has {outputs} output(s)")]
    NoSuchOutput { node: String, of: String, port: usize, outputs: usize },
    #[error("node `{node}` has an input `{input}` that is not `name`, `name:port` or `^name`")]
    MalformedInput { node: String, input: String },
    #[error(
        "node `{node}` is of op type `{op}`, which TensorFlow does not know and the graph's library does not define"
    )]
    UnknownOp { node: String, op: String },
    #[error("node `{node}` is of op type `{op}`, which the pass did not declare in `emits`")]
    Undeclared { node: String, op: String },
    #[error("node `{node}`'s outputs cannot be counted: {reason}")]
    Uncountable { node: String, reason: String },
    #[error("node `{0}`, which TensorFlow asked to keep, is gone")]
    LostPreserved(String),
    #[error("node `{node}`, which TensorFlow asked to keep, had {before} output(s) and now has {after}")]
    ChangedOutputs { node: String, before: usize, after: usize },
    #[error("the answer has a cycle outside any loop, through `{0}`")]
    Cycle(String),
    #[error("node `{node}` has a malformed device string `{device}`")]
    BadDevice { node: String, device: String },
    #[error("node `{node}` ({op}) is placed on the {device_type} device, which has no kernel for it")]
    NoKernel { node: String, op: String, device_type: String },
    #[error(
        "node `{node}` is placed on `{device}`, which is no device of this process (TensorFlow would crash \
         partitioning the function)"
    )]
    NoSuchDevice { node: String, device: String },
    #[error("node `{node}` ({op}) has {got} data input(s), and its op takes {expected}")]
    Arity { node: String, op: String, expected: usize, got: usize },
    #[error("input {index} of node `{node}` ({op}) is {actual} from `{input}`, and the op expects {expected} there")]
    TypeMismatch { node: String, op: String, index: usize, input: String, actual: String, expected: String },
    #[error("node `{node}` ({op}): {problem}")]
    BadAttr { node: String, op: String, problem: String },
    #[error(
        "node `{node}` on `{device}` uses resource `{input}`, which lives on `{resource_device}`: a resource is \
         used on its own device"
    )]
    ResourceElsewhere { node: String, device: String, input: String, resource_device: String },
    #[error(
        "node `{node}` is an argument or result of the function, which lives where the caller put it (`{from}`); \
         the answer moves it to `{to}`"
    )]
    MovedArgument { node: String, from: String, to: String },
    #[error("the answer changes the graph's versions; a pass rewrites nodes, never the versions")]
    ChangedVersions,
    #[error("the answer changes function `{0}` of the graph's library; a pass rewrites the graph's own nodes")]
    ChangedLibrary(String),
    #[error("node `{0}` is a call placed on the device with XLA turned back on (`_XlaMustCompile`), which the host turned off")]
    XlaReenabled(String),
    #[error("the answer has {answer} {what}, the given graph {given}: more than the pass's max-growth allows")]
    Growth { what: &'static str, given: usize, answer: usize },
}

/// Checks `answer`, the bytes a pass returned for `given`; returns the
/// decoded graph when TensorFlow may have it.
pub fn check_answer(
    given: &GraphDef,
    answer: &[u8],
    expect: &Expectations<'_>,
    catalog: &dyn OpCatalog,
) -> Result<GraphDef, Refusal> {
    let allowed = |given: usize, allowance: usize| (given as f64 * expect.max_growth.max(1.0)) as usize + allowance;
    let given_bytes = given.encoded_len();
    if answer.len() > allowed(given_bytes, Expectations::BYTE_ALLOWANCE) {
        return Err(Refusal::Growth { what: "bytes", given: given_bytes, answer: answer.len() });
    }
    let graph = GraphDef::decode(answer).map_err(|e| Refusal::Unparseable(e.to_string()))?;
    if graph.node.len() > allowed(given.node.len(), Expectations::NODE_ALLOWANCE) {
        return Err(Refusal::Growth { what: "nodes", given: given.node.len(), answer: graph.node.len() });
    }
    if graph.versions != given.versions {
        return Err(Refusal::ChangedVersions);
    }
    if graph.library != given.library {
        return Err(Refusal::ChangedLibrary(changed_function(given, &graph)));
    }
    let signatures = Signatures::new(&graph, catalog);
    let mut outputs: HashMap<&str, usize> = HashMap::with_capacity(graph.node.len());
    for node in &graph.node {
        if outputs.contains_key(node.name.as_str()) {
            return Err(Refusal::DuplicateName(node.name.clone()));
        }
        let count = signatures.outputs(node)?;
        outputs.insert(&node.name, count);
    }
    for node in &graph.node {
        for input in &node.input {
            let (source, port) = parse_input(input)
                .ok_or_else(|| Refusal::MalformedInput { node: node.name.clone(), input: input.clone() })?;
            let Some(&count) = outputs.get(source) else {
                return Err(Refusal::DanglingInput { node: node.name.clone(), input: input.clone() });
            };
            if let Some(port) = port.filter(|&port| port >= count) {
                return Err(Refusal::NoSuchOutput {
                    node: node.name.clone(),
                    of: source.to_owned(),
                    port,
                    outputs: count,
                });
            }
        }
    }

    let given_signatures = Signatures::new(given, catalog);
    for name in expect.preserve {
        let Some(&after) = outputs.get(name.as_str()) else {
            return Err(Refusal::LostPreserved(name.clone()));
        };
        if let Some(before) = given.node.iter().find(|n| &n.name == name) {
            // The given graph is TensorFlow's: a node it cannot count has the
            // same op in both, or the answer's count failed above.
            if let Ok(before) = given_signatures.outputs(before) {
                if before != after {
                    return Err(Refusal::ChangedOutputs { node: name.clone(), before, after });
                }
            }
        }
    }

    if let Some(node) = cycle(&graph) {
        if cycle(given).is_none() {
            return Err(Refusal::Cycle(node));
        }
    }

    let given_nodes: HashMap<&str, &NodeDef> = given.node.iter().map(|n| (n.name.as_str(), n)).collect();
    let given_ops: HashSet<&str> = given.node.iter().map(|n| n.op.as_str()).collect();
    let library: HashSet<&str> = graph
        .library
        .iter()
        .flat_map(|l| &l.function)
        .filter_map(|f| f.signature.as_ref())
        .map(|s| s.name.as_str())
        .collect();
    let on_device = format!("device:{}:", expect.device_type);
    let devices = Devices::of(given, expect.device_type, expect.device_count);
    // The nodes the pass added or changed; TensorFlow's own, untouched, are
    // not the pass's to answer for.
    let touched: HashSet<&str> = graph
        .node
        .iter()
        .filter(|node| given_nodes.get(node.name.as_str()).is_none_or(|before| *before != *node))
        .map(|node| node.name.as_str())
        .collect();
    for node in graph.node.iter().filter(|node| touched.contains(node.name.as_str())) {
        if !well_formed_device(&node.device) {
            return Err(Refusal::BadDevice { node: node.name.clone(), device: node.device.clone() });
        }
        if !devices.has(&node.device) {
            return Err(Refusal::NoSuchDevice { node: node.name.clone(), device: node.device.clone() });
        }
        if node.device.contains(&on_device) && must_compile(node) {
            let before = given_nodes.get(node.name.as_str()).is_some_and(|before| must_compile(before));
            if !before {
                return Err(Refusal::XlaReenabled(node.name.clone()));
            }
        }
        if !library.contains(node.op.as_str()) {
            if let Some(op) = signatures.op(&node.op) {
                if let Some(problem) = types::attr_problem(node, &op) {
                    return Err(Refusal::BadAttr { node: node.name.clone(), op: node.op.clone(), problem });
                }
            }
        }
        if !given_ops.contains(node.op.as_str())
            && !library.contains(node.op.as_str())
            && !expect.emits.iter().any(|op| op == &node.op)
        {
            return Err(Refusal::Undeclared { node: node.name.clone(), op: node.op.clone() });
        }
        if matches!(node.op.as_str(), "_Arg" | "_Retval") {
            if let Some(before) = given_nodes.get(node.name.as_str()).filter(|before| before.device != node.device) {
                return Err(Refusal::MovedArgument {
                    node: node.name.clone(),
                    from: before.device.clone(),
                    to: node.device.clone(),
                });
            }
        }
    }
    // The edges before the kernels: a node whose inputs TensorFlow would not
    // import is refused for that, whatever its types would run on.
    check_edges(&graph, &given_nodes, &touched, &signatures)?;
    for node in graph.node.iter().filter(|node| touched.contains(node.name.as_str())) {
        if node.device.contains(&on_device)
            && !library.contains(node.op.as_str())
            && !catalog.has_kernel(node)
            && !placed_there_already(given, node, &on_device)
        {
            return Err(Refusal::NoKernel {
                node: node.name.clone(),
                op: node.op.clone(),
                device_type: expect.device_type.to_owned(),
            });
        }
    }
    Ok(graph)
}

/// The edges TensorFlow's importer checks, for every node the pass added
/// or changed and every node reading one: as many data inputs as the op
/// takes, each of the type it expects; and a resource used on the device
/// it lives on (unless TensorFlow's own graph had that edge so: a call may
/// take resources of several devices).
fn check_edges(
    graph: &GraphDef,
    given_nodes: &HashMap<&str, &NodeDef>,
    touched: &HashSet<&str>,
    signatures: &Signatures<'_>,
) -> Result<(), Refusal> {
    if touched.is_empty() {
        return Ok(());
    }
    let nodes: HashMap<&str, &NodeDef> = graph.node.iter().map(|n| (n.name.as_str(), n)).collect();
    for node in &graph.node {
        let data: Vec<(&str, usize)> = node
            .input
            .iter()
            .filter_map(|input| match parse_input(input) {
                Some((source, Some(port))) => Some((source, port)),
                _ => None,
            })
            .collect();
        let is_touched = touched.contains(node.name.as_str());
        if !is_touched && !data.iter().any(|(source, _)| touched.contains(source)) {
            continue;
        }
        let signature = match signatures.signature(node) {
            Ok(signature) => signature,
            // TensorFlow's own node, whose signature this check cannot
            // tell: TensorFlow judges it, as before the pass.
            Err(_) if !is_touched => continue,
            Err(reason) => return Err(Refusal::Uncountable { node: node.name.clone(), reason }),
        };
        if signature.inputs.len() != data.len() {
            return Err(Refusal::Arity {
                node: node.name.clone(),
                op: node.op.clone(),
                expected: signature.inputs.len(),
                got: data.len(),
            });
        }
        for (index, (&(source, port), &expected)) in data.iter().zip(&signature.inputs).enumerate() {
            let Some(source_node) = nodes.get(source) else { continue };
            let Ok(source_signature) = signatures.signature(source_node) else { continue };
            let Some(&actual) = source_signature.outputs.get(port) else { continue };
            if !types::compatible(expected, actual) {
                return Err(Refusal::TypeMismatch {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    index,
                    input: node.input[index].clone(),
                    actual: types::type_name(actual),
                    expected: types::type_name(expected),
                });
            }
            if expected == types::DT_RESOURCE
                && source_node.device != node.device
                && !source_node.device.is_empty()
                && !node.device.is_empty()
            {
                let before = given_nodes.get(node.name.as_str()).zip(given_nodes.get(source));
                let tensorflows_own = before.is_some_and(|(before, source_before)| {
                    before.device == node.device
                        && source_before.device == source_node.device
                        && before.input.get(index) == node.input.get(index)
                });
                if !tensorflows_own {
                    return Err(Refusal::ResourceElsewhere {
                        node: node.name.clone(),
                        device: node.device.clone(),
                        input: node.input[index].clone(),
                        resource_device: source_node.device.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Whether `node` asks XLA to compile it (`_XlaMustCompile: true`).
fn must_compile(node: &NodeDef) -> bool {
    node.attr.get("_XlaMustCompile").is_some_and(|v| matches!(v.value, Some(attr_value::Value::B(true))))
}

/// The name of a function the answer's library changed, added or dropped.
fn changed_function(given: &GraphDef, answer: &GraphDef) -> String {
    let functions = |graph: &GraphDef| -> HashMap<String, Vec<u8>> {
        graph
            .library
            .iter()
            .flat_map(|l| &l.function)
            .map(|f| (f.signature.as_ref().map(|s| s.name.clone()).unwrap_or_default(), f.encode_to_vec()))
            .collect()
    };
    let (before, after) = (functions(given), functions(answer));
    let mut names: Vec<&String> =
        before.keys().chain(after.keys()).filter(|n| before.get(*n) != after.get(*n)).collect();
    names.sort();
    names.first().map(|n| n.to_string()).unwrap_or_else(|| "(gradients or the library's other fields)".into())
}

/// The devices a node of an answer may be placed on: those the given graph
/// uses, and each of this process's devices of the host's type and the CPU
/// every TensorFlow task has (`CPU:0`) under every job, replica and task
/// the given graph names. An empty device only when
/// the given graph has unplaced nodes too.
struct Devices {
    names: HashSet<String>,
    unplaced: bool,
}

impl Devices {
    fn of(given: &GraphDef, device_type: &str, count: usize) -> Devices {
        let mut names: HashSet<String> = HashSet::new();
        let mut unplaced = false;
        for node in &given.node {
            if node.device.is_empty() {
                unplaced = true;
                continue;
            }
            if names.contains(&node.device) {
                continue;
            }
            if let Some((prefix, _)) = node.device.split_once("/device:") {
                if prefix.starts_with("/job:") {
                    names.extend((0..count).map(|i| format!("{prefix}/device:{device_type}:{i}")));
                    names.insert(format!("{prefix}/device:CPU:0"));
                }
            }
            names.insert(node.device.clone());
        }
        if !names.iter().any(|name| name.starts_with("/job:")) {
            // A graph placed nowhere yet: the process's own job.
            let prefix = "/job:localhost/replica:0/task:0";
            names.extend((0..count).map(|i| format!("{prefix}/device:{device_type}:{i}")));
            names.insert(format!("{prefix}/device:CPU:0"));
        }
        Devices { names, unplaced }
    }

    fn has(&self, device: &str) -> bool {
        if device.is_empty() {
            self.unplaced
        } else {
            self.names.contains(device)
        }
    }
}

/// Whether TensorFlow itself placed a node of `node`'s op and types on the
/// device in the given graph: then a kernel for them exists there, whether
/// the device's own or one of TensorFlow's for every device.
fn placed_there_already(given: &GraphDef, node: &NodeDef, on_device: &str) -> bool {
    fn types(node: &NodeDef) -> Vec<(&str, i32)> {
        let mut types: Vec<(&str, i32)> = node
            .attr
            .iter()
            .filter_map(|(name, value)| match value.value {
                Some(attr_value::Value::Type(dtype)) => Some((name.as_str(), dtype)),
                _ => None,
            })
            .collect();
        types.sort_unstable();
        types
    }
    let wanted = types(node);
    given.node.iter().any(|n| n.op == node.op && n.device.contains(on_device) && types(n) == wanted)
}

/// `name`, `name:port` or `^name` → the node and, for a data input, the port.
pub fn parse_input(input: &str) -> Option<(&str, Option<usize>)> {
    if let Some(control) = input.strip_prefix('^') {
        return (!control.is_empty() && !control.contains(':')).then_some((control, None));
    }
    match input.rsplit_once(':') {
        Some((name, port)) => {
            let port = port.parse().ok().filter(|_| !port.starts_with('+'))?;
            (!name.is_empty()).then_some((name, Some(port)))
        }
        None => (!input.is_empty()).then_some((input, Some(0))),
    }
}

/// Op signatures: TensorFlow's registry, then the graph's own functions.
struct Signatures<'a> {
    catalog: &'a dyn OpCatalog,
    functions: HashMap<&'a str, &'a OpDef>,
    known: std::cell::RefCell<HashMap<String, Option<std::rc::Rc<OpDef>>>>,
}

impl<'a> Signatures<'a> {
    fn new(graph: &'a GraphDef, catalog: &'a dyn OpCatalog) -> Self {
        let functions = graph
            .library
            .iter()
            .flat_map(|l| &l.function)
            .filter_map(|f| f.signature.as_ref())
            .map(|s| (s.name.as_str(), s))
            .collect();
        Signatures { catalog, functions, known: Default::default() }
    }

    /// TensorFlow's definition of `op` (cached), not a library function's.
    fn op(&self, op: &str) -> Option<std::rc::Rc<OpDef>> {
        if let Some(def) = self.known.borrow().get(op) {
            return def.clone();
        }
        let def = self.catalog.op_def(op).map(std::rc::Rc::new);
        self.known.borrow_mut().insert(op.to_owned(), def.clone());
        def
    }

    /// `node`'s input and output types, or why they cannot be told.
    fn signature(&self, node: &NodeDef) -> Result<Signature, String> {
        if let Some(signature) = self.functions.get(node.op.as_str()) {
            return types::signature(node, signature);
        }
        let def = self.op(&node.op).ok_or_else(|| format!("TensorFlow has no op {}", node.op))?;
        types::signature(node, &def)
    }

    /// How many outputs `node` has.
    fn outputs(&self, node: &NodeDef) -> Result<usize, Refusal> {
        let unknown = || Refusal::UnknownOp { node: node.name.clone(), op: node.op.clone() };
        if let Some(signature) = self.functions.get(node.op.as_str()) {
            return count_outputs(node, signature);
        }
        let def = self.op(&node.op);
        count_outputs(node, def.as_deref().ok_or_else(unknown)?)
    }
}

/// The number of output tensors `node` has under `signature`: one per
/// plain output argument, N for `N * T`, the list's length for a type list.
fn count_outputs(node: &NodeDef, signature: &OpDef) -> Result<usize, Refusal> {
    let uncountable = |reason: String| Refusal::Uncountable { node: node.name.clone(), reason };
    let mut total = 0usize;
    for arg in &signature.output_arg {
        let count = types::arg_count(node, signature, arg).map_err(uncountable)?;
        total = total.checked_add(count).ok_or_else(|| uncountable("too many outputs".into()))?;
    }
    Ok(total)
}

/// A node on a cycle of data and control edges, not counting the back edges
/// of loops (those out of `NextIteration`), or `None` when there is none.
fn cycle(graph: &GraphDef) -> Option<String> {
    let index: HashMap<&str, usize> = graph.node.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); graph.node.len()];
    let mut waiting = vec![0usize; graph.node.len()];
    for (i, node) in graph.node.iter().enumerate() {
        for input in &node.input {
            let Some(&source) = parse_input(input).and_then(|(name, _)| index.get(name)) else {
                continue;
            };
            if graph.node[source].op == "NextIteration" || graph.node[source].op == "RefNextIteration" {
                continue;
            }
            consumers[source].push(i);
            waiting[i] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..graph.node.len()).filter(|&i| waiting[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = ready.pop() {
        done += 1;
        for &consumer in &consumers[i] {
            waiting[consumer] -= 1;
            if waiting[consumer] == 0 {
                ready.push(consumer);
            }
        }
    }
    (done < graph.node.len()).then(|| {
        let stuck = waiting.iter().position(|&w| w > 0).unwrap_or(0);
        graph.node[stuck].name.clone()
    })
}

/// Whether `device` is empty or a device specification TensorFlow parses:
/// `/job:NAME`, `/replica:N`, `/task:N` and `/device:TYPE:N` (or `:*`, or
/// the legacy `/cpu:N` and `/gpu:N`), each at most once, in that order.
pub fn well_formed_device(device: &str) -> bool {
    if device.is_empty() {
        return true;
    }
    let Some(rest) = device.strip_prefix('/') else {
        return false;
    };
    let name = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let number = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    let id = |s: &str| s == "*" || number(s);
    let mut stage = 0; // job, replica, task, device: each at most once, in order
    for part in rest.split('/') {
        let (key, value) = part.split_once(':').unwrap_or((part, ""));
        let at = match key {
            "job" if name(value) => 0,
            "replica" if id(value) => 1,
            "task" if id(value) => 2,
            "device" => match value.split_once(':') {
                Some((kind, n)) if name(kind) && id(n) => 3,
                None if name(value) => 3,
                _ => return false,
            },
            "cpu" | "gpu" | "CPU" | "GPU" if id(value) => 3,
            _ => return false,
        };
        if at < stage {
            return false;
        }
        stage = at + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfwasm_proto::graph::op_def::{ArgDef, AttrDef};
    use tfwasm_proto::graph::{AttrValue, FunctionDef, FunctionDefLibrary, VersionDef};

    /// A catalog of a few ops: `Const` (1 output), `Add` (1), `Split`
    /// (`num_split` outputs), `NoOp` (0), `NextIteration`, `Merge` (2);
    /// kernels on the device for `Add` only.
    struct Ops;

    impl OpCatalog for Ops {
        fn op_def(&self, op: &str) -> Option<OpDef> {
            let float = |name: &str| ArgDef { name: name.into(), r#type: 1, ..Default::default() };
            let (inputs, outputs) = match op {
                "Const" => (vec![], vec![float("y")]),
                "Add" => (vec![float("x"), float("y")], vec![float("z")]),
                "NextIteration" => (vec![float("x")], vec![float("y")]),
                "Merge" => (vec![float("a"), float("b")], vec![float("y"), ArgDef { r#type: 3, ..float("index") }]),
                "Split" => (vec![float("value")], vec![ArgDef { number_attr: "num_split".into(), ..float("y") }]),
                "Read" => (vec![ArgDef { r#type: types::DT_RESOURCE, ..float("v") }], vec![float("y")]),
                "Handle" => (vec![], vec![ArgDef { r#type: types::DT_RESOURCE, ..float("v") }]),
                "NoOp" => (vec![], vec![]),
                _ => return None,
            };
            let attr = match op {
                "Split" => vec![AttrDef { name: "num_split".into(), r#type: "int".into(), ..Default::default() }],
                _ => vec![],
            };
            Some(OpDef { name: op.into(), input_arg: inputs, output_arg: outputs, attr, ..Default::default() })
        }

        fn has_kernel(&self, node: &NodeDef) -> bool {
            matches!(node.op.as_str(), "Add" | "Read")
        }
    }

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn graph(nodes: Vec<NodeDef>) -> GraphDef {
        GraphDef { node: nodes, ..Default::default() }
    }

    fn given() -> GraphDef {
        graph(vec![node("a", "Const", &[]), node("b", "Const", &[]), node("sum", "Add", &["a", "b:0"])])
    }

    fn expect<'a>(preserve: &'a [String], emits: &'a [String]) -> Expectations<'a> {
        Expectations { device_type: "WASM", preserve, emits, device_count: 1, max_growth: 4.0 }
    }

    fn check(answer: &GraphDef, preserve: &[&str], emits: &[&str]) -> Result<GraphDef, Refusal> {
        let preserve: Vec<String> = preserve.iter().map(|s| s.to_string()).collect();
        let emits: Vec<String> = emits.iter().map(|s| s.to_string()).collect();
        let expect = expect(&preserve, &emits);
        check_answer(&given(), &answer.encode_to_vec(), &expect, &Ops)
    }

    #[test]
    fn the_given_graph_itself_passes() {
        assert_eq!(check(&given(), &["sum"], &[]).unwrap(), given());
    }

    #[test]
    fn garbage_is_unparseable() {
        let expect = expect(&[], &[]);
        let refused = check_answer(&given(), &[0xff, 0xff, 0xff], &expect, &Ops).unwrap_err();
        assert!(matches!(refused, Refusal::Unparseable(_)), "{refused}");
    }

    #[test]
    fn each_broken_answer_is_refused_with_its_reason() {
        let mut duplicate = given();
        duplicate.node.push(node("a", "Const", &[]));
        assert_eq!(check(&duplicate, &[], &[]), Err(Refusal::DuplicateName("a".into())));

        let mut dangling = given();
        dangling.node[2].input[1] = "nowhere".into();
        assert!(matches!(check(&dangling, &[], &[]), Err(Refusal::DanglingInput { .. })));

        let mut control_dangling = given();
        control_dangling.node[2].input.push("^gone".into());
        assert!(matches!(check(&control_dangling, &[], &[]), Err(Refusal::DanglingInput { .. })));

        let mut past_outputs = given();
        past_outputs.node[2].input[1] = "b:1".into();
        assert_eq!(
            check(&past_outputs, &[], &[]),
            Err(Refusal::NoSuchOutput { node: "sum".into(), of: "b".into(), port: 1, outputs: 1 })
        );

        let mut unknown = given();
        unknown.node.push(node("x", "Frobnicate", &["sum"]));
        assert!(matches!(check(&unknown, &[], &["Frobnicate"]), Err(Refusal::UnknownOp { .. })));

        let mut undeclared = given();
        undeclared.node.push(node("split", "Split", &["sum"]));
        undeclared
            .node
            .last_mut()
            .unwrap()
            .attr
            .insert("num_split".into(), AttrValue { value: Some(attr_value::Value::I(2)) });
        assert!(matches!(check(&undeclared, &[], &[]), Err(Refusal::Undeclared { .. })));
        assert!(check(&undeclared, &[], &["Split"]).is_ok(), "declared, it passes");

        let mut lost = given();
        lost.node.pop();
        assert_eq!(check(&lost, &["sum"], &[]), Err(Refusal::LostPreserved("sum".into())));

        let mut cyclic = given();
        cyclic.node[0] = node("a", "Add", &["sum", "b"]);
        assert!(matches!(check(&cyclic, &[], &[]), Err(Refusal::Cycle(_))));

        let mut bad_device = given();
        bad_device.node[2].device = "/device:WASM".into();
        assert!(
            matches!(check(&bad_device, &[], &[]), Err(Refusal::NoSuchDevice { .. })),
            "a partial spec names no device TensorFlow can partition on"
        );
        bad_device.node[2].device = "device:WASM:0".into();
        assert!(matches!(check(&bad_device, &[], &[]), Err(Refusal::BadDevice { .. })));

        let mut no_kernel = given();
        no_kernel.node[0].device = "/job:localhost/replica:0/task:0/device:WASM:0".into();
        assert!(
            matches!(check(&no_kernel, &[], &[]), Err(Refusal::NoKernel { .. })),
            "no Const kernel in this catalog"
        );
        no_kernel.node[0].device.clear();
        no_kernel.node[2].device = "/job:localhost/replica:0/task:0/device:WASM:0".into();
        assert!(check(&no_kernel, &[], &[]).is_ok(), "Add has one");

        // A Const on the device already in the given graph: TensorFlow found a kernel for it.
        let mut before = given();
        before.node[1].device = "/job:localhost/replica:0/task:0/device:WASM:0".into();
        let mut answer = before.clone();
        answer.node.push(node("c", "Const", &[]));
        answer.node.last_mut().unwrap().device = before.node[1].device.clone();
        assert!(check_answer(&before, &answer.encode_to_vec(), &expect(&[], &[]), &Ops).is_ok());
    }

    #[test]
    fn a_preserved_node_keeps_its_outputs() {
        let split = |n: i64| {
            let mut split = node("split", "Split", &["a"]);
            split.attr.insert("num_split".into(), AttrValue { value: Some(attr_value::Value::I(n)) });
            split
        };
        let before = graph(vec![node("a", "Const", &[]), split(3)]);
        let after = graph(vec![node("a", "Const", &[]), split(2)]);
        let preserve = vec!["split".to_owned()];
        assert_eq!(
            check_answer(&before, &after.encode_to_vec(), &expect(&preserve, &[]), &Ops),
            Err(Refusal::ChangedOutputs { node: "split".into(), before: 3, after: 2 })
        );
    }

    #[test]
    fn a_loop_back_edge_is_not_a_cycle() {
        let looped = graph(vec![
            node("init", "Const", &[]),
            node("merge", "Merge", &["init", "next"]),
            node("step", "Add", &["merge", "merge:1"]),
            node("next", "NextIteration", &["step"]),
        ]);
        assert_eq!(cycle(&looped), None);
        let mut broken = looped.clone();
        broken.node[3].op = "Add".into();
        assert!(cycle(&broken).is_some());
    }

    #[test]
    fn calls_of_library_functions_count_their_signature() {
        let float = |name: &str| ArgDef { name: name.into(), r#type: 1, ..Default::default() };
        let signature = OpDef {
            name: "twice".into(),
            input_arg: vec![float("x")],
            output_arg: vec![float("y"); 2],
            ..Default::default()
        };
        let mut before = given();
        before.library = Some(FunctionDefLibrary {
            function: vec![FunctionDef { signature: Some(signature), ..Default::default() }],
            ..Default::default()
        });
        let mut answer = before.clone();
        answer.node.push(node("call", "twice", &["sum"]));
        answer.node.push(node("use", "Add", &["call:1", "call:0"]));
        let check = |answer: &GraphDef| check_answer(&before, &answer.encode_to_vec(), &expect(&[], &[]), &Ops);
        assert!(check(&answer).is_ok());
        answer.node.last_mut().unwrap().input[0] = "call:2".into();
        assert!(matches!(check(&answer), Err(Refusal::NoSuchOutput { outputs: 2, .. })));
    }

    const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
    const WASM0: &str = "/job:localhost/replica:0/task:0/device:WASM:0";

    /// `given()` placed: the constants on the CPU, the sum on the device,
    /// and a variable there read by `read`.
    fn placed() -> GraphDef {
        let mut graph = given();
        graph.node[0].device = CPU.into();
        graph.node[1].device = CPU.into();
        graph.node[2].device = WASM0.into();
        graph.node.push(NodeDef { device: WASM0.into(), ..node("var", "Handle", &[]) });
        graph.node.push(NodeDef { device: WASM0.into(), ..node("read", "Read", &["var"]) });
        graph.versions = Some(VersionDef { producer: 2100, ..Default::default() });
        graph
    }

    fn check_placed(answer: &GraphDef) -> Result<GraphDef, Refusal> {
        check_answer(&placed(), &answer.encode_to_vec(), &expect(&[], &["Merge".into()]), &Ops)
    }

    #[test]
    fn a_node_goes_only_to_a_device_that_exists() {
        assert!(check_placed(&placed()).is_ok());
        for device in [
            "/job:localhost/replica:0/task:0/device:WASM:1",
            "/job:localhost/replica:0/task:0/device:CPU:3",
            "/job:worker/replica:0/task:0/device:CPU:0",
            "/device:WASM:0",
            "",
        ] {
            let mut answer = placed();
            answer.node[2].device = device.into();
            assert_eq!(
                check_placed(&answer),
                Err(Refusal::NoSuchDevice { node: "sum".into(), device: device.into() }),
                "{device:?}"
            );
        }
        let mut to_cpu = placed();
        to_cpu.node[2].device = CPU.into();
        assert!(check_placed(&to_cpu).is_ok(), "the CPU the graph uses exists");
        let two = Expectations { device_count: 2, ..expect(&[], &[]) };
        let mut second = placed();
        second.node[2].device = "/job:localhost/replica:0/task:0/device:WASM:1".into();
        assert!(check_answer(&placed(), &second.encode_to_vec(), &two, &Ops).is_ok(), "a second device exists");
    }

    #[test]
    fn edges_are_typed_and_counted_as_tensorflow_imports_them() {
        let mut short = placed();
        short.node[2].input.pop();
        assert_eq!(
            check_placed(&short),
            Err(Refusal::Arity { node: "sum".into(), op: "Add".into(), expected: 2, got: 1 })
        );
        let mut long = placed();
        long.node[2].input.insert(1, "a".into());
        assert!(matches!(check_placed(&long), Err(Refusal::Arity { expected: 2, got: 3, .. })));
        let mut controls = placed();
        controls.node[2].input.push("^a".into());
        assert!(check_placed(&controls).is_ok(), "control inputs are not data inputs");

        // The split's second output is an int32 index: Merge's, here.
        let mut mistyped = placed();
        mistyped.node.push(NodeDef { device: WASM0.into(), ..node("m", "Merge", &["a", "b"]) });
        mistyped.node[2].input[1] = "m:1".into();
        let refused = check_placed(&mistyped).unwrap_err();
        assert_eq!(
            refused,
            Refusal::TypeMismatch {
                node: "sum".into(),
                op: "Add".into(),
                index: 1,
                input: "m:1".into(),
                actual: "int32".into(),
                expected: "float".into()
            }
        );
        // A reader of a changed node is checked though it is untouched.
        let mut reader = placed();
        reader.node[1].op = "Merge".into();
        reader.node[1].input = vec!["a".into(), "a".into()];
        reader.node[2].input[1] = "b:1".into();
        assert!(matches!(check_placed(&reader), Err(Refusal::TypeMismatch { .. })));
    }

    #[test]
    fn a_resource_is_used_on_its_device() {
        let mut moved = placed();
        moved.node[4].device = CPU.into();
        assert_eq!(
            check_placed(&moved),
            Err(Refusal::ResourceElsewhere {
                node: "read".into(),
                device: CPU.into(),
                input: "var".into(),
                resource_device: WASM0.into()
            })
        );
        // TensorFlow's own cross-device resource edge (a call's) stays legal.
        let mut before = placed();
        before.node[4].device = CPU.into();
        let mut answer = before.clone();
        answer.node[2].input.push("^read".into());
        assert!(check_answer(&before, &answer.encode_to_vec(), &expect(&[], &[]), &Ops).is_ok());
    }

    #[test]
    fn versions_library_xla_attributes_and_growth_are_the_hosts() {
        let mut versions = placed();
        versions.versions = Some(VersionDef { producer: 1, ..Default::default() });
        assert_eq!(check_placed(&versions), Err(Refusal::ChangedVersions));

        let mut library = placed();
        library.library = Some(FunctionDefLibrary {
            function: vec![FunctionDef {
                signature: Some(OpDef { name: "sneaky".into(), ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(check_placed(&library), Err(Refusal::ChangedLibrary("sneaky".into())));

        let mut xla = placed();
        xla.node[2].attr.insert("_XlaMustCompile".into(), AttrValue { value: Some(attr_value::Value::B(true)) });
        assert_eq!(check_placed(&xla), Err(Refusal::XlaReenabled("sum".into())));
        xla.node[2].device = CPU.into();
        assert!(check_placed(&xla).is_ok(), "XLA on the CPU is TensorFlow's own");

        let mut attr = placed();
        attr.node[2].attr.insert("bogus".into(), AttrValue { value: Some(attr_value::Value::I(1)) });
        assert!(matches!(check_placed(&attr), Err(Refusal::BadAttr { .. })));

        let mut grown = placed();
        for i in 0..(placed().node.len() * 4 + Expectations::NODE_ALLOWANCE) {
            grown.node.push(NodeDef { device: CPU.into(), ..node(&format!("c{i}"), "Const", &[]) });
        }
        assert!(matches!(check_placed(&grown), Err(Refusal::Growth { what: "nodes", .. })));
        grown.node.truncate(placed().node.len() + 100);
        assert!(check_placed(&grown).is_ok(), "within the allowance");
    }

    #[test]
    fn inputs_parse_as_tensorflow_writes_them() {
        assert_eq!(parse_input("a"), Some(("a", Some(0))));
        assert_eq!(parse_input("a/b_1:12"), Some(("a/b_1", Some(12))));
        assert_eq!(parse_input("^ctl"), Some(("ctl", None)));
        for bad in ["", "^", ":1", "a:", "a:x", "a:+1", "^a:1", "a:-1"] {
            assert_eq!(parse_input(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn device_strings() {
        for ok in [
            "",
            "/job:localhost/replica:0/task:0/device:WASM:0",
            "/device:CPU:0",
            "/device:GPU:*",
            "/job:worker/task:3",
            "/cpu:0",
            "/job:localhost/replica:0/task:0/device:CPU",
        ] {
            assert!(well_formed_device(ok), "{ok:?}");
        }
        for bad in ["cpu:0", "/device:WASM:x", "/task:0/job:w", "/device:0:0", "/job:", "/device:WASM:0/", "//"] {
            assert!(!well_formed_device(bad), "{bad:?}");
        }
    }
}
