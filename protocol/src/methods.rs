//! Every method and notification, each defined once: its name, its params and result types and,
//! for a request, whether a client may send it again after the connection dropped before the
//! reply. The client, the schema, the fuzz target and the tests take their lists from here.

use crate::{capability, environment, environment_config, fs, http, network, process, session};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A request method. The types are markers (`methods::ProcessStart`), used qualified since some
/// share a name with their result type (`methods::EnvironmentInfo`).
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + JsonSchema;
    type Result: Serialize + DeserializeOwned + JsonSchema;
    const RETRY: Retry;
}

/// A notification, in either direction.
pub trait Notification {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + JsonSchema;
}

/// Whether a call may be sent again after its connection dropped before the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Repeating it has the same effect as sending it once.
    Safe,
    Never,
}

/// Code that needs each method's types: [`visit`] calls it once per method and notification.
pub trait Visitor {
    fn request<M: Method>(&mut self) {}
    fn notification<N: Notification>(&mut self) {}
}

macro_rules! methods {
    (
        requests { $($request:ident, $request_const:ident = $request_name:literal:
            $params:ty => $result:ty, $retry:ident;)* }
        notifications { $($notification:ident, $notification_const:ident = $notification_name:literal:
            $notification_params:ty;)* }
    ) => {
        $(
            #[doc = concat!("`", $request_name, "`")]
            pub struct $request;

            impl Method for $request {
                const NAME: &'static str = $request_name;
                type Params = $params;
                type Result = $result;
                const RETRY: Retry = Retry::$retry;
            }
        )*
        $(
            #[doc = concat!("`", $notification_name, "`")]
            pub struct $notification;

            impl Notification for $notification {
                const NAME: &'static str = $notification_name;
                type Params = $notification_params;
            }
        )*

        /// Every method and notification name, for code that matches on names.
        pub mod names {
            $(pub const $request_const: &str = $request_name;)*
            $(pub const $notification_const: &str = $notification_name;)*
        }

        /// The names of all request methods.
        pub const REQUESTS: &[&str] = &[$($request_name),*];

        /// The names of all notifications.
        pub const NOTIFICATIONS: &[&str] = &[$($notification_name),*];

        impl Retry {
            /// What the table says of `name`; an unknown method is never repeated.
            pub fn for_method(name: &str) -> Self {
                match name {
                    $($request_name => Retry::$retry,)*
                    _ => Retry::Never,
                }
            }
        }

        pub fn visit(visitor: &mut impl Visitor) {
            $(visitor.request::<$request>();)*
            $(visitor.notification::<$notification>();)*
        }
    };
}

// Methods that take no params take `()`: absent, null and `{}` all decode to it.
methods! {
    requests {
        Initialize, INITIALIZE = "initialize":
            session::InitializeParams => session::InitializeResult, Never;
        ProcessStart, PROCESS_START = "process/start":
            process::StartParams => process::StartResult, Never;
        ProcessRead, PROCESS_READ = "process/read":
            process::ReadParams => process::ReadResult, Safe;
        ProcessWrite, PROCESS_WRITE = "process/write":
            process::WriteParams => process::WriteResult, Safe;
        ProcessSignal, PROCESS_SIGNAL = "process/signal":
            process::SignalParams => fs::EmptyResult, Never;
        ProcessTerminate, PROCESS_TERMINATE = "process/terminate":
            process::ProcessIdParams => process::TerminateResult, Safe;
        ProcessResize, PROCESS_RESIZE = "process/resize":
            process::ResizeParams => fs::EmptyResult, Safe;
        ProcessCloseStdin, PROCESS_CLOSE_STDIN = "process/closeStdin":
            process::ProcessIdParams => fs::EmptyResult, Safe;
        ProcessList, PROCESS_LIST = "process/list":
            () => process::ListResult, Safe;
        FsReadFile, FS_READ_FILE = "fs/readFile":
            fs::ReadFileParams => fs::ReadFileResult, Safe;
        FsWriteFile, FS_WRITE_FILE = "fs/writeFile":
            fs::WriteFileParams => fs::EmptyResult, Safe;
        FsCreateDirectory, FS_CREATE_DIRECTORY = "fs/createDirectory":
            fs::CreateDirectoryParams => fs::EmptyResult, Never;
        FsGetMetadata, FS_GET_METADATA = "fs/getMetadata":
            fs::GetMetadataParams => fs::Metadata, Safe;
        FsReadDirectory, FS_READ_DIRECTORY = "fs/readDirectory":
            fs::PathParams => fs::ReadDirectoryResult, Safe;
        FsRemove, FS_REMOVE = "fs/remove":
            fs::RemoveParams => fs::EmptyResult, Never;
        FsCopy, FS_COPY = "fs/copy":
            fs::CopyParams => fs::EmptyResult, Never;
        FsRename, FS_RENAME = "fs/rename":
            fs::RenameParams => fs::EmptyResult, Never;
        FsCanonicalize, FS_CANONICALIZE = "fs/canonicalize":
            fs::PathParams => fs::CanonicalizeResult, Safe;
        FsWalk, FS_WALK = "fs/walk":
            fs::WalkParams => fs::WalkResult, Never;
        FsOpen, FS_OPEN = "fs/open":
            fs::OpenParams => fs::HandleResult, Never;
        FsReadBlock, FS_READ_BLOCK = "fs/readBlock":
            fs::ReadBlockParams => fs::ReadBlockResult, Never;
        FsWriteBlock, FS_WRITE_BLOCK = "fs/writeBlock":
            fs::WriteBlockParams => fs::WriteBlockResult, Never;
        FsClose, FS_CLOSE = "fs/close":
            fs::CloseParams => fs::EmptyResult, Safe;
        FsWatch, FS_WATCH = "fs/watch":
            fs::WatchParams => fs::WatchResult, Never;
        FsUnwatch, FS_UNWATCH = "fs/unwatch":
            fs::UnwatchParams => fs::EmptyResult, Never;
        FsWatchMissing, FS_WATCH_MISSING = "fs/watchMissing":
            fs::WatchMissingParams => fs::WatchMissingResult, Never;
        EnvironmentInfo, ENVIRONMENT_INFO = "environment/info":
            () => environment::EnvironmentInfo, Safe;
        EnvironmentStatus, ENVIRONMENT_STATUS = "environment/status":
            () => environment::EnvironmentStatus, Safe;
        EnvironmentConfigRead, ENVIRONMENT_CONFIG_READ = "environmentConfig/read":
            environment_config::EnvironmentConfigReadParams
                => environment_config::EnvironmentConfigReadResponse, Safe;
        HttpRequest, HTTP_REQUEST = "http/request":
            http::HttpRequestParams => http::HttpRequestResult, Never;
        CapabilityRootsDiscover, CAPABILITY_ROOTS_DISCOVER = "capabilityRoots/discoverV1":
            capability::DiscoverParams => capability::DiscoverResult, Safe;
        CapabilitiesDiscoverV2, CAPABILITIES_DISCOVER_V2 = "capabilities/discoverV2":
            capability::DiscoverV2Params => capability::DiscoverV2Result, Safe;
    }
    notifications {
        Initialized, INITIALIZED = "initialized": ();
        ProcessOutput, PROCESS_OUTPUT = "process/output": process::OutputNotification;
        ProcessExited, PROCESS_EXITED = "process/exited": process::ExitedNotification;
        ProcessClosed, PROCESS_CLOSED = "process/closed": process::ClosedNotification;
        ProcessInputWait, PROCESS_INPUT_WAIT = "process/inputWait":
            process::InputWaitNotification;
        FsChanged, FS_CHANGED = "fs/changed": fs::ChangedNotification;
        FsMissingChanged, FS_MISSING_CHANGED = "fs/missingChanged":
            fs::MissingChangedNotification;
        HttpRequestBodyDelta, HTTP_REQUEST_BODY_DELTA = "http/request/bodyDelta":
            http::HttpBodyDelta;
        NetworkPolicyDecision, NETWORK_POLICY_DECISION = "network/policyDecision":
            network::PolicyDecisionNotification;
    }
}
