"""A lane's repository as the supervisor reads it: Git run so that it runs nothing the
lane wrote (``git_command``, ``git``), the worktree's git dirs resolved from their files
(``git_dirs``), the worktree digest (``worktree_digest``), a writer's ref directory
(``refs``) and its private object store (``objects``)."""
