-- Argo CD's health of a GpuNodePool (argocd-cm key
-- resource.customizations.health.fakegpu.dev_GpuNodePool), read as kstatus reads it:
-- Progressing until the operator has seen the pool's generation, Degraded while it is Stalled
-- (it cannot get ready without a change from the user), Healthy once Ready, else Progressing.
-- Lua 5.1, as Argo CD embeds it; the e2e suite runs it against the pools it checks by kstatus.
hs = {}
local status = obj.status
if status == nil or status.observedGeneration == nil
    or status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "the operator has not seen generation " .. tostring(obj.metadata.generation) .. " yet"
  return hs
end
local ready = nil
for _, condition in ipairs(status.conditions or {}) do
  if condition.type == "Stalled" and condition.status == "True" then
    hs.status = "Degraded"
    hs.message = condition.reason .. ": " .. (condition.message or "")
    return hs
  end
  if condition.type == "Ready" then
    ready = condition
  end
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
elseif ready ~= nil then
  hs.status = "Progressing"
else
  hs.status = "Progressing"
  ready = {message = "no Ready condition yet"}
end
hs.message = ready.message or ""
return hs
