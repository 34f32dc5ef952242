//! The cache configurations written beside the job: LMCache's YAML (PyYAML's block style) and HiCache's TOML.

use indexmap::IndexMap;

use crate::config::args::ArgValue;
use crate::util::pyyaml::Node;

/// A table as PyYAML writes it with `safe_dump(sort_keys=False)` (LMCache's configuration).
pub(super) fn yaml(t: &IndexMap<String, ArgValue>) -> String {
    crate::util::pyyaml::dump_node(&node(&ArgValue::Table(t.clone())))
}

fn node(v: &ArgValue) -> Node {
    match v {
        ArgValue::Str(s) | ArgValue::Path(s) => Node::Str(s.clone()),
        ArgValue::Int(i) => Node::Raw(i.to_string()),
        ArgValue::Float(f) => Node::float(*f),
        ArgValue::Bool(b) => Node::Raw(b.to_string()),
        ArgValue::List(l) => Node::Seq(l.iter().map(node).collect()),
        ArgValue::Table(t) => Node::Map(t.iter().map(|(k, v)| (k.clone(), node(v))).collect()),
    }
}

/// A table's values as CloudAI's `toml.dumps` writes them (the HiCache configuration).
pub(super) fn py(v: &ArgValue) -> crate::util::pytoml::PyVal {
    use crate::util::pytoml::PyVal;
    match v {
        ArgValue::Str(s) | ArgValue::Path(s) => PyVal::str(s.clone()),
        ArgValue::Int(i) => PyVal::Int(*i),
        ArgValue::Float(f) => PyVal::Float(*f),
        ArgValue::Bool(b) => PyVal::Bool(*b),
        ArgValue::List(l) => PyVal::List(l.iter().map(py).collect()),
        ArgValue::Table(t) => PyVal::Table(t.iter().map(|(k, v)| (k.clone(), py(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_is_pyyamls_in_the_order_given() {
        let mut t = IndexMap::new();
        t.insert("n".to_string(), ArgValue::Int(2));
        t.insert(
            "ports".to_string(),
            ArgValue::List(vec![ArgValue::Int(1), ArgValue::Int(2)]),
        );
        let mut sub = IndexMap::new();
        sub.insert("on".to_string(), ArgValue::Bool(false));
        t.insert("x".to_string(), ArgValue::Table(sub));
        t.insert(
            "url".to_string(),
            ArgValue::Str("{frontend_node}:8300".into()),
        );
        t.insert("ratio".to_string(), ArgValue::Float(0.5));
        assert_eq!(
            yaml(&t),
            "n: 2\nports:\n- 1\n- 2\nx:\n  'on': false\nurl: '{frontend_node}:8300'\nratio: 0.5\n"
        );
    }
}
