/** The managed DNS API: GET, POST, PUT and DELETE /domain/dns (registered and delegated domains). */
import { z } from 'zod';
import { changeZoneRecord, listZoneRecords } from '@boxes/core';
import { DnsChangeOutput, DnsRecordChangeInput, DnsRecordDeleteInput, DnsZoneOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

const RULES =
  'Types A, AAAA, CNAME, MX, TXT (up to 2048 characters), SRV, CAA; names inside the zone ("@" the apex, "*" as the leftmost label for a wildcard); TTL 60 to 86400 (default 3600); 1 to 20 values per record and at most 500 records (values) per zone, reserved ones included; no CNAME at the apex or beside other data. Records that carry the account mail (apex MX, SPF and NS, DKIM, DMARC) are read-only and cannot be shadowed (403 dns_record_reserved); other TXT values may stand at the apex. byo_manual accounts, free subdomains and delegations not yet verified have no editable zone (409 dns_not_managed). Needs the admin scope and a key without a box restriction; terms_of_service: true.';

const change = (action: 'create' | 'replace', method: 'POST' | 'PUT', summary: string, what: string) =>
  keyProcedure
    .meta({
      errors: ['dns_not_managed', 'dns_record_exists', 'dns_record_reserved', 'not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method,
        path: '/domain/dns',
        tags: ['dns'],
        summary,
        description: `${what} ${RULES} Bumps the SOA serial and appends domain.dns.changed; answers the record set and the new serial.`,
      },
    })
    .input(DnsRecordChangeInput)
    .output(DnsChangeOutput)
    .mutation(({ ctx, input }) => changeZoneRecord(ctx.svc, { accountId: ctx.account.id, actorKeyId: ctx.key.id, action, record: input }));

export const dnsRouter = router({
  list: keyProcedure
    .meta({
      errors: ['dns_not_managed'],
      openapi: {
        method: 'GET',
        path: '/domain/dns',
        tags: ['dns'],
        summary: "The zone's records",
        description:
          'Every record of the account zone (registered and byo_delegated domains), one entry per name and type (the reserved SPF value and the other TXT values of the apex as two), with the SOA serial. Names fully qualified without the trailing dot; TXT values unquoted. byo_manual: 409 dns_not_managed pointing to GET /events?type=domain.dns_required. Any valid key.',
      },
    })
    .input(z.void())
    .output(DnsZoneOutput)
    .query(({ ctx }) => listZoneRecords(ctx.svc, ctx.account.id)),
  create: change('create', 'POST', 'Add a record', 'Adds the record set of a name and type; 409 dns_record_exists if the zone has one (PUT replaces it).'),
  replace: change(
    'replace',
    'PUT',
    'Replace a record (created if missing)',
    "Replaces the ttl and values of a name and type's record set, or creates it when missing.",
  ),
  delete: keyProcedure
    .meta({
      errors: ['dns_not_managed', 'dns_record_exists', 'dns_record_reserved', 'not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'DELETE',
        path: '/domain/dns',
        tags: ['dns'],
        summary: 'Delete a record',
        description: `Deletes the record set (every value) of a name and type, given in the query string or a JSON body; 404 if there is none. ${RULES}`,
      },
    })
    .input(DnsRecordDeleteInput)
    .output(DnsChangeOutput)
    .mutation(({ ctx, input }) =>
      changeZoneRecord(ctx.svc, { accountId: ctx.account.id, actorKeyId: ctx.key.id, action: 'delete', record: { name: input.name, type: input.type } }),
    ),
});
