// Validates monitoring.coreos.com resources offline against the prometheus-operator schemas.
// Input on stdin: a JSON array of resources. Output: one line per problem; exit 1 if any.
// The schemas come from @kubernetes-models/prometheus-operator (pinned in package.json), which
// compiles them from prometheus-operator's API types: required fields, enums, duration patterns.
import { readFileSync } from "node:fs";
import * as v1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import * as v1alpha1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1alpha1";

const MODELS = {
  "monitoring.coreos.com/v1": v1,
  "monitoring.coreos.com/v1alpha1": v1alpha1,
};

function problemsOf(resource) {
  const name = `${resource.kind}/${resource.metadata?.name ?? "?"}`;
  const Model = MODELS[resource.apiVersion]?.[resource.kind];
  if (Model === undefined) {
    return [`${name}: no schema for ${resource.apiVersion} ${resource.kind}`];
  }
  try {
    new Model(resource).validate();
    return [];
  } catch (error) {
    return [`${name}: ${error.message}`];
  }
}

const resources = JSON.parse(readFileSync(0, "utf8"));
const problems = resources.flatMap(problemsOf);
for (const problem of problems) {
  console.log(problem);
}
console.log(`validated ${resources.length} resource(s), ${problems.length} problem(s)`);
process.exit(problems.length === 0 ? 0 : 1);
