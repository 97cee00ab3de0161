-- Flux view: keep the view out of a job's environment (docs/user/images.md).
--
-- Two things of the view would otherwise reach every task:
-- - LD_LIBRARY_PATH=/opt/flux/lib/flux, which flux-core's PMI plugin
--   prepends so that programs linked with libpmi.so find Flux's. The view's
--   libpmi is built for the view's glibc, so loaded into an application on
--   its own glibc it may fail; MPICH needs no libpmi (it speaks PMI over
--   PMI_FD), and pre-v5 Open MPI opens FLUX_PMI_LIBRARY_PATH, kept.
-- - SHELL=/opt/flux/libexec/flux-view/sh, which the start script sets for
--   the broker (it runs rc1 and rc3 with $SHELL -c; the image may have no
--   shell) and which the initial program's jobs inherit.
-- Runs at task.init, after the PMI plugin's.

local pmidir = "/opt/flux/lib/flux"
local viewsh = "/opt/flux/libexec/flux-view/sh"

local function without(path, dir)
    local kept = {}
    for entry in string.gmatch(path, "[^:]+") do
        if entry ~= dir then table.insert(kept, entry) end
    end
    return table.concat(kept, ":")
end

plugin.register {
    name = "view-env",
    handlers = {
        {
            topic = "task.init",
            fn = function ()
                local ld = task.getenv("LD_LIBRARY_PATH")
                if ld then
                    local rest = without(ld, pmidir)
                    if rest == "" then
                        task.unsetenv("LD_LIBRARY_PATH")
                    else
                        task.setenv("LD_LIBRARY_PATH", rest)
                    end
                end
                if task.getenv("SHELL") == viewsh then
                    task.unsetenv("SHELL")
                end
            end
        }
    }
}
