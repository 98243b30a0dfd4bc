//! JSON Schema for every wire message, keyed by method and direction.

use crate::methods::{self, Method, Notification, Visitor};
use crate::rpc;
use schemars::{schema_for, Schema};

/// `(name, schema)` for each message: `<method>.params`, `<method>.result`, notifications'
/// params, and the envelope itself. Methods without params have the schema of null.
pub fn all() -> Vec<(String, Schema)> {
    struct Collect(Vec<(String, Schema)>);
    impl Visitor for Collect {
        fn request<M: Method>(&mut self) {
            self.0
                .push((format!("{}.params", M::NAME), schema_for!(M::Params)));
            self.0
                .push((format!("{}.result", M::NAME), schema_for!(M::Result)));
        }
        fn notification<N: Notification>(&mut self) {
            self.0
                .push((format!("{}.params", N::NAME), schema_for!(N::Params)));
        }
    }
    let mut collect = Collect(vec![("message".into(), schema_for!(rpc::Message))]);
    methods::visit(&mut collect);
    collect.0
}

#[cfg(test)]
mod tests {
    use crate::methods::{NOTIFICATIONS, REQUESTS};

    /// The schema once lacked the results of `process/signal`, `resize` and `closeStdin`.
    #[test]
    fn every_method_has_a_params_and_a_result_schema() {
        let names: Vec<String> = super::all().into_iter().map(|(name, _)| name).collect();
        let expected = REQUESTS
            .iter()
            .flat_map(|method| [format!("{method}.params"), format!("{method}.result")])
            .chain(NOTIFICATIONS.iter().map(|name| format!("{name}.params")));
        for name in expected {
            assert!(names.contains(&name), "no schema for {name}");
        }
    }
}
