// Shared by the @azure/cosmos tests that read change feeds.
import { StatusCodes } from "@azure/cosmos";

/** The ids a change feed iterator lists until it answers 304 (nothing new). */
export async function drain(iterator) {
  const seen = [];
  for (;;) {
    const page = await iterator.readNext();
    if (page.statusCode === StatusCodes.NotModified) return seen;
    seen.push(...page.result.map((d) => d.id));
  }
}
