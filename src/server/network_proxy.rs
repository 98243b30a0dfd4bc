//! A process's managed proxy reports to its session's client: the audit of each decision
//! (`network/policyDecision`) and the decisions the policy leaves to the client
//! (`network/policyRequest`). Whichever connection is attached when the proxy reports is told;
//! with none attached, no one is, and an open decision is a refusal.

use crate::netproxy::Reporter;
use crate::process::Attachment;
use crate::rpc::outbound::Outbound;
use exec_server_protocol::network::{
    PolicyDecisionNotification, PolicyRequestParams, PolicyRequestResult, PolicyVerdict,
    NETWORK_POLICY_REQUEST,
};
use exec_server_protocol::rpc::method::NETWORK_POLICY_DECISION;
use futures::future::BoxFuture;
use futures::FutureExt as _;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Audit events queued at most per process; more are dropped (the audit is best effort, and
/// a client slow to read must not hold the proxy's memory).
const AUDIT_BACKLOG: usize = 256;

pub(super) struct SessionReporter {
    attachment: watch::Receiver<Option<Attachment>>,
    /// To the task that sends the audit in order; it ends when this does.
    audit: mpsc::Sender<PolicyDecisionNotification>,
}

impl SessionReporter {
    pub(super) fn new(attachment: watch::Receiver<Option<Attachment>>) -> Self {
        let (audit, mut events) = mpsc::channel::<PolicyDecisionNotification>(AUDIT_BACKLOG);
        let reporter = Self { attachment, audit };
        let attached = reporter.attachment.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let Some(outbound) = attached_outbound(&attached) {
                    let _ = outbound.notify(NETWORK_POLICY_DECISION, &event).await;
                }
            }
        });
        reporter
    }
}

/// The connection attached to the session now, if any.
fn attached_outbound(attachment: &watch::Receiver<Option<Attachment>>) -> Option<Outbound> {
    let attached = attachment.borrow();
    attached.as_ref().map(|attached| attached.outbound.clone())
}

impl Reporter for SessionReporter {
    fn audit(&self, event: PolicyDecisionNotification) {
        let _ = self.audit.try_send(event);
    }

    fn ask(
        &self,
        request: PolicyRequestParams,
        within: Duration,
    ) -> BoxFuture<'static, Option<PolicyVerdict>> {
        let outbound = attached_outbound(&self.attachment);
        async move {
            let outbound = outbound?;
            let asked = outbound.request(NETWORK_POLICY_REQUEST, &request);
            let reply = tokio::time::timeout(within, asked).await.ok()?.ok()?;
            // An error or a result that is no decision: the client did not allow it.
            let result: PolicyRequestResult = serde_json::from_value(reply.ok()?).ok()?;
            Some(result.decision)
        }
        .boxed()
    }
}
