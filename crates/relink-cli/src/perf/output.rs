//! How `relink perf` prints: lines flushed as they happen (text or JSON),
//! warnings that do not stop a run, and the verbs names of work completion
//! statuses and CM events.

use std::io::Write;

use relink_fabric::{CmEventKind, WcStatus};

/// Line-oriented output that is flushed after every line, so a reader (a
/// test, a pipe) sees each event as it happens.
pub(super) struct Lines<'a> {
    pub(super) out: &'a mut dyn Write,
    pub(super) json: bool,
}

impl Lines<'_> {
    /// Prints `text`, or `value` as one line of JSON with `--json`.
    pub(super) fn event(&mut self, text: &str, value: serde_json::Value) -> std::io::Result<()> {
        if self.json {
            serde_json::to_writer(&mut *self.out, &value)?;
            writeln!(self.out)?;
        } else {
            writeln!(self.out, "{text}")?;
        }
        self.out.flush()
    }

    /// Prints `text` as is, in either mode.
    pub(super) fn raw(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.out, "{text}")?;
        self.out.flush()
    }
}

/// Prints a warning that must not stop the run.
pub(super) fn warn(msg: &str) {
    eprintln!("relink: warning: {msg}");
}

/// The `ibv_wc_status` name of a status, without the `IBV_WC_` prefix.
pub(super) fn status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "SUCCESS",
        WcStatus::LocLenErr => "LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
        WcStatus::LocProtErr => "LOC_PROT_ERR",
        WcStatus::WrFlushErr => "WR_FLUSH_ERR",
        WcStatus::MwBindErr => "MW_BIND_ERR",
        WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
        WcStatus::RemAccessErr => "REM_ACCESS_ERR",
        WcStatus::RemOpErr => "REM_OP_ERR",
        WcStatus::RetryExcErr => "RETRY_EXC_ERR",
        WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
        WcStatus::GeneralErr => "GENERAL_ERR",
        _ => "UNKNOWN_ERR",
    }
}

/// The `rdma_cm_event_type` name of a CM event, without `RDMA_CM_EVENT_`.
pub(super) fn cm_event_name(k: &CmEventKind) -> &'static str {
    match k {
        CmEventKind::AddrResolved => "ADDR_RESOLVED",
        CmEventKind::AddrError => "ADDR_ERROR",
        CmEventKind::RouteResolved => "ROUTE_RESOLVED",
        CmEventKind::RouteError => "ROUTE_ERROR",
        CmEventKind::ConnectRequest { .. } => "CONNECT_REQUEST",
        CmEventKind::Established { .. } => "ESTABLISHED",
        CmEventKind::Rejected { .. } => "REJECTED",
        CmEventKind::Unreachable => "UNREACHABLE",
        CmEventKind::ConnectError => "CONNECT_ERROR",
        CmEventKind::Disconnected => "DISCONNECTED",
        CmEventKind::DeviceRemoval => "DEVICE_REMOVAL",
        CmEventKind::AddrChange => "ADDR_CHANGE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names() {
        assert_eq!(status_name(WcStatus::WrFlushErr), "WR_FLUSH_ERR");
        assert_eq!(status_name(WcStatus::Success), "SUCCESS");
        assert_eq!(cm_event_name(&CmEventKind::DeviceRemoval), "DEVICE_REMOVAL");
    }
}
