/** The managed DNS API: GET, POST, PUT and DELETE /domain/dns (registered and delegated domains). */
import { z } from 'zod';
import { changeZoneRecord, listZoneRecords } from '@boxes/core';
import { DnsChangeOutput, DnsRecordChangeInput, DnsRecordDeleteInput, DnsZoneOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

const RULES =
  'Types A, AAAA, CNAME, MX, TXT, SRV, CAA; names inside the zone; TTL 60 to 86400; at most 20 values per record and 500 records per zone; no CNAME at the apex or beside other data. Records that carry the account mail (apex MX, SPF and NS, DKIM, DMARC) are read-only (403 dns_record_reserved). byo_manual and free subdomains have no managed zone (409 dns_not_managed). Needs the admin scope and an unrestricted key; terms_of_service: true.';

const change = (action: 'create' | 'replace', method: 'POST' | 'PUT', summary: string) =>
  keyProcedure
    .meta({ scope: 'admin', accountWide: true, openapi: { method, path: '/domain/dns', tags: ['dns'], summary, description: `${summary}. ${RULES} Bumps the SOA serial; appends domain.dns.changed.` } })
    .input(DnsRecordChangeInput)
    .output(DnsChangeOutput)
    .mutation(({ ctx, input }) => changeZoneRecord(ctx.svc, { accountId: ctx.account.id, action, record: input }));

export const dnsRouter = router({
  list: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/domain/dns',
        tags: ['dns'],
        summary: "The zone's records",
        description: 'Every record of the account zone (registered and byo_delegated domains), grouped by name and type, with the SOA serial. byo_manual: 409 dns_not_managed pointing to GET /events?type=domain.dns_required. Any valid key.',
      },
    })
    .input(z.void())
    .output(DnsZoneOutput)
    .query(({ ctx }) => listZoneRecords(ctx.svc, ctx.account.id)),
  create: change('create', 'POST', 'Add a record'),
  replace: change('replace', 'PUT', 'Replace a record (created if missing)'),
  delete: keyProcedure
    .meta({ scope: 'admin', accountWide: true, openapi: { method: 'DELETE', path: '/domain/dns', tags: ['dns'], summary: 'Delete a record', description: `Deletes the record (every value) of name and type. ${RULES}` } })
    .input(DnsRecordDeleteInput)
    .output(DnsChangeOutput)
    .mutation(({ ctx, input }) => changeZoneRecord(ctx.svc, { accountId: ctx.account.id, action: 'delete', record: { name: input.name, type: input.type } })),
});
