import io.paradoxical.cassieq.api.client.CassieqApi;
import io.paradoxical.cassieq.api.client.CassieqCredentials;
import io.paradoxical.cassieq.model.GetMessageResponse;
import io.paradoxical.cassieq.model.QueueCreateOptions;
import io.paradoxical.cassieq.model.QueueName;
import io.paradoxical.cassieq.model.UpdateMessageRequest;
import io.paradoxical.cassieq.model.UpdateMessageResponse;
import io.paradoxical.cassieq.model.accounts.AccountKey;
import io.paradoxical.cassieq.model.accounts.AccountName;
import retrofit.Response;

/**
 * The original CassieQ Java client, used as its users use it, against a server: create a queue,
 * put, get, update, get again, ack, get on the empty queue, ack with a stale receipt, delete the
 * queue. Each step prints one tab-separated line ("STEP", the step, the HTTP status, then fields)
 * for the test to check, apart from the client's own logging; the program itself checks nothing,
 * so every answer reaches the test as it came.
 *
 * Arguments: base URL, account name, account key, queue name.
 */
public final class ClientRoundTrip {
    private static void line(String step, Response<?> r, String... fields) {
        StringBuilder b = new StringBuilder("STEP\t").append(step).append('\t').append(r.code());
        for (String f : fields) {
            b.append('\t').append(f == null ? "<null>" : f.replace('\t', ' ').replace('\n', ' '));
        }
        System.out.println(b);
    }

    private static String[] message(GetMessageResponse m) {
        if (m == null) {
            return new String[0];
        }
        return new String[] {
            "receipt=" + m.getPopReceipt(),
            "message=" + m.getMessage(),
            "deliveryCount=" + m.getDeliveryCount(),
            "tag=" + (m.getMessageTag() == null ? null : m.getMessageTag().get()),
        };
    }

    public static void main(String[] args) throws Exception {
        String base = args[0];
        AccountName account = AccountName.valueOf(args[1]);
        QueueName queue = QueueName.valueOf(args[3]);
        CassieqApi api =
                CassieqApi.createClient(base, CassieqCredentials.key(account, AccountKey.valueOf(args[2])));

        line("create", api.createQueue(account, new QueueCreateOptions(queue)).execute());
        line("put", api.addMessage(account, queue, "hello from java").execute());

        Response<GetMessageResponse> got = api.getMessage(account, queue, 30L).execute();
        line("get", got, message(got.body()));
        String first = got.body() == null ? "none" : got.body().getPopReceipt();

        Response<UpdateMessageResponse> updated =
                api.updateMessage(account, queue, first, new UpdateMessageRequest("updated by java", 0))
                   .execute();
        UpdateMessageResponse u = updated.body();
        line("update", updated,
             "receipt=" + (u == null ? null : u.getPopReceipt()),
             "tag=" + (u == null || u.getMessageTag() == null ? null : u.getMessageTag().get()));

        Response<GetMessageResponse> again = api.getMessage(account, queue, 30L).execute();
        line("get-again", again, message(again.body()));
        String second = again.body() == null ? "none" : again.body().getPopReceipt();

        line("ack", api.ackMessage(account, queue, second).execute());
        Response<GetMessageResponse> empty = api.getMessage(account, queue).execute();
        line("get-empty", empty, message(empty.body()));
        line("ack-stale", api.ackMessage(account, queue, first).execute());
        line("delete", api.deleteQueue(account, queue).execute());
    }
}
