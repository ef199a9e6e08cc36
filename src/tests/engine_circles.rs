//! No import circle between the engine's modules (DESIGN §6: folders by
//! concern, data flows one way). A plain `#[test]` (no Postgres): it reads
//! every file under `src/engine`, collects the `crate::engine::…` paths it
//! names outside comments (`use` lines, grouped `use crate::engine::{…}`
//! lists, full paths in code) and, in a file directly under `src/engine`,
//! its `super::…` paths, and builds the graph between the direct children of
//! `engine/` (`engine::push`, `engine::pull`, `engine::schema`, …). Any
//! cycle fails the test, named with the files that make each edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules it names → the files that name them.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The direct child of `engine/` a file belongs to (`push/apply.rs` →
/// `push`, `clock.rs` → `clock`); `None` for `engine/mod.rs`.
fn owner(relative: &Path) -> Option<String> {
    let mut parts = relative.components();
    let first = parts.next()?.as_os_str().to_str()?.to_owned();
    if parts.next().is_some() {
        return Some(first);
    }
    let name = first.strip_suffix(".rs")?;
    (name != "mod").then(|| name.to_owned())
}

/// The source without comments: `//` to the end of the line (doc comments
/// name modules in links, which are not imports) and `/* … */` blocks.
/// A `//` inside a string literal cuts the rest of that line, which can only
/// hide a path, never invent one.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        let line_comment = rest.find("//");
        let block_comment = rest.find("/*");
        match (line_comment, block_comment) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |end| &rest[l + end..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b + 2..].find("*/").map_or("", |end| &rest[b + 2 + end + 2..]);
            }
            (None, None) => {
                out.push_str(rest);
                rest = "";
            }
            (Some(_), None) => unreachable!("the first arm takes a line comment without a block comment"),
        }
    }
    out
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The first-level items of a `{…}` group starting right after its `{`:
/// `a, b::{c, d}, e::f` → `a`, `b`, `e`.
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut at_item = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_item = true,
            c if at_item && depth == 0 && !c.is_whitespace() => {
                let head = ident(&s[i..]);
                if !head.is_empty() && head != "self" {
                    heads.push(head.to_owned());
                }
                at_item = false;
            }
            _ => {}
        }
    }
    heads
}

/// The engine modules `source` names: `crate::engine::x…`,
/// `crate::engine::{x, y::…}` and, when `top_level`, `super::x`.
fn named_modules(source: &str, top_level: bool) -> BTreeSet<String> {
    let code = strip_comments(source);
    let mut named = BTreeSet::new();
    for (i, _) in code.match_indices("crate::engine::") {
        let rest = &code[i + "crate::engine::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            named.extend(group_heads(group));
        } else {
            let head = ident(rest);
            if !head.is_empty() {
                named.insert(head.to_owned());
            }
        }
    }
    if top_level {
        for (i, _) in code.match_indices("super::") {
            // `super::super::…` and `use super::*` (a test module) name no sibling.
            let preceded = code[..i].ends_with("::");
            let rest = &code[i + "super::".len()..];
            if preceded {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                named.extend(group_heads(group));
            } else {
                let head = ident(rest);
                if !head.is_empty() && head != "super" {
                    named.insert(head.to_owned());
                }
            }
        }
    }
    named
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module graph of the engine under `root` (`src/engine`).
fn engine_graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut graph = Graph::new();
    for path in files {
        let relative = path.strip_prefix(root).expect("under the root");
        let Some(from) = owner(relative) else { continue };
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let node = graph.entry(from.clone()).or_default();
        for to in named_modules(&source, relative.components().count() == 1) {
            if to != from {
                node.entry(to).or_default().insert(relative.display().to_string());
            }
        }
    }
    graph
}

/// Every cycle's strongly connected component (Tarjan), each with one
/// concrete cycle through it, as `a -> b -> … -> a`.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<Vec<&'g str>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(|edges| edges.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    self.components.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.components.into_iter().map(|c| cycle_through(graph, &c)).collect()
}

/// One cycle inside `component` starting at its first module (breadth-first
/// back to the start, through the component only).
fn cycle_through(graph: &Graph, component: &[&str]) -> Vec<String> {
    let start = component[0];
    let inside: BTreeSet<&str> = component.iter().copied().collect();
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flat_map(|edges| edges.keys()).map(String::as_str) {
            if !inside.contains(w) {
                continue;
            }
            if w == start {
                let mut back = Vec::new();
                let mut at = v;
                while at != start {
                    back.push(at.to_owned());
                    at = previous[at];
                }
                let mut path = vec![start.to_owned()];
                path.extend(back.into_iter().rev());
                path.push(start.to_owned());
                return path;
            }
            if !previous.contains_key(w) {
                previous.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("a strongly connected component has a cycle through each member")
}

/// The failure text: each cycle, then each of its edges with the files.
fn describe(graph: &Graph, found: &[Vec<String>]) -> String {
    let mut text = String::new();
    for cycle in found {
        text.push_str(&format!("import circle: engine::{}\n", cycle.join(" -> engine::")));
        for pair in cycle.windows(2) {
            let files: Vec<&str> = graph[&pair[0]][&pair[1]].iter().map(String::as_str).collect();
            text.push_str(&format!("  {} -> {}: {}\n", pair[0], pair[1], files.join(", ")));
        }
    }
    text
}

#[test]
fn the_engine_has_no_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let graph = engine_graph(&root);
    assert!(graph.contains_key("push") && graph.contains_key("pull"), "the engine was not read: {graph:?}");
    let found = cycles(&graph);
    assert!(found.is_empty(), "\n{}", describe(&graph, &found));
}

mod finder {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::new();
        for (from, to) in edges {
            g.entry((*from).to_owned()).or_default().entry((*to).to_owned()).or_default().insert(format!("{from}.rs"));
            g.entry((*to).to_owned()).or_default();
        }
        g
    }

    #[test]
    fn a_circle_is_found_and_named() {
        let g = graph(&[("round", "push"), ("push", "blobs"), ("blobs", "round"), ("round", "clock"), ("pull", "clock")]);
        let found = cycles(&g);
        assert_eq!(found, vec![vec!["blobs", "round", "push", "blobs"]]);
        let text = describe(&g, &found);
        assert!(text.contains("engine::blobs -> engine::round -> engine::push -> engine::blobs"), "{text}");
        assert!(text.contains("push -> blobs: push.rs"), "{text}");
    }

    #[test]
    fn two_separate_circles_are_both_found() {
        let g = graph(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "e"), ("e", "c"), ("b", "c")]);
        assert_eq!(cycles(&g).len(), 2);
    }

    #[test]
    fn a_layered_graph_passes() {
        let g = graph(&[("round", "push"), ("round", "pull"), ("push", "schema"), ("pull", "schema"), ("schema", "error")]);
        assert!(cycles(&g).is_empty());
    }

    #[test]
    fn imports_are_read_from_code_not_comments() {
        let source = "//! links [`crate::engine::round`]\n\
                      use crate::engine::auth::caller::Caller;\n\
                      use crate::engine::{clock, pull::window::{self, run_window}, self};\n\
                      /* crate::engine::schema */\n\
                      fn f() { crate::engine::validators::refuse_reentry(\"x\"); } // crate::engine::push\n\
                      use super::budget::Budget;\n\
                      mod tests { use super::*; }\n";
        let named = named_modules(source, true);
        let expected: BTreeSet<String> =
            ["auth", "clock", "pull", "validators", "budget"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(named, expected);
        assert!(!named_modules(source, false).contains("budget"), "super:: counts only in a top-level file");
    }

    #[test]
    fn files_belong_to_the_engines_direct_children() {
        assert_eq!(owner(Path::new("push/apply.rs")).as_deref(), Some("push"));
        assert_eq!(owner(Path::new("pull/bootstrap/image.rs")).as_deref(), Some("pull"));
        assert_eq!(owner(Path::new("clock.rs")).as_deref(), Some("clock"));
        assert_eq!(owner(Path::new("mod.rs")), None);
    }
}
