//! Process trees as `/proc` lists them: a supervisor's descendants, a process's children.

/// Every process below `root`, through every thread's children. One that exits during the
/// walk has its children re-parented to the supervisor, where the walk may meet them again:
/// each is listed once.
pub(crate) fn descendants(root: i32) -> std::collections::HashSet<i32> {
    let mut pending = vec![root];
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = pending.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            for child in children.unwrap_or_default().split_whitespace() {
                if let Ok(child) = child.parse::<i32>() {
                    if seen.insert(child) {
                        pending.push(child);
                    }
                }
            }
        }
    }
    seen
}

/// The children of the single-threaded process `pid` (its one task lists them all).
pub(crate) fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
}
