import java.util.Properties;

import org.quartz.DisallowConcurrentExecution;
import org.quartz.Job;
import org.quartz.JobBuilder;
import org.quartz.JobDetail;
import org.quartz.JobExecutionContext;
import org.quartz.JobKey;
import org.quartz.Scheduler;
import org.quartz.SimpleScheduleBuilder;
import org.quartz.Trigger;
import org.quartz.TriggerBuilder;
import org.quartz.impl.StdSchedulerFactory;

/**
 * One instance of a clustered Quartz scheduler (JobStoreTX, the
 * PostgreSQLDelegate) named "leasewatch", for collectors/postgres's
 * quartz_test.go. It schedules job nightly.report, unless the cluster has
 * it already: a trigger every 500 ms, the job marked
 * DisallowConcurrentExecution and requestsRecovery. Each run holds the job
 * for hold_ms unless it is the re-run of a failed instance's fire, which
 * returns at once. It prints one JSON line when the scheduler has started
 * and one when each run starts and ends, and runs until it is killed.
 *
 * Usage: QuartzNode jdbc-url user password instance-id checkin-interval-ms hold-ms
 */
public class QuartzNode {
    static String instance;
    static long holdMillis;

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: QuartzNode jdbc-url user password instance-id checkin-interval-ms hold-ms");
            System.exit(2);
        }
        instance = args[3];
        holdMillis = Long.parseLong(args[5]);
        Properties p = new Properties();
        p.setProperty("org.quartz.scheduler.instanceName", "leasewatch");
        p.setProperty("org.quartz.scheduler.instanceId", instance);
        p.setProperty("org.quartz.scheduler.skipUpdateCheck", "true");
        p.setProperty("org.quartz.threadPool.threadCount", "2");
        p.setProperty("org.quartz.jobStore.class", "org.quartz.impl.jdbcjobstore.JobStoreTX");
        p.setProperty("org.quartz.jobStore.driverDelegateClass", "org.quartz.impl.jdbcjobstore.PostgreSQLDelegate");
        p.setProperty("org.quartz.jobStore.dataSource", "db");
        p.setProperty("org.quartz.jobStore.isClustered", "true");
        p.setProperty("org.quartz.jobStore.clusterCheckinInterval", args[4]);
        p.setProperty("org.quartz.dataSource.db.provider", "hikaricp");
        p.setProperty("org.quartz.dataSource.db.driver", "org.postgresql.Driver");
        p.setProperty("org.quartz.dataSource.db.URL", args[0]);
        p.setProperty("org.quartz.dataSource.db.user", args[1]);
        p.setProperty("org.quartz.dataSource.db.password", args[2]);
        p.setProperty("org.quartz.dataSource.db.maxConnections", "4");
        Scheduler s = new StdSchedulerFactory(p).getScheduler();

        JobKey key = JobKey.jobKey("report", "nightly");
        if (!s.checkExists(key)) {
            JobDetail job = JobBuilder.newJob(Hold.class).withIdentity(key).requestRecovery(true).build();
            Trigger every = TriggerBuilder.newTrigger().withIdentity("every-500ms", "nightly").forJob(job).startNow()
                    .withSchedule(SimpleScheduleBuilder.simpleSchedule().withIntervalInMilliseconds(500).repeatForever())
                    .build();
            s.scheduleJob(job, every);
        }
        s.start();
        System.out.println("{\"event\":\"started\",\"instance\":\"" + instance + "\",\"at\":" + System.currentTimeMillis() + "}");
        Thread.currentThread().join();
    }

    /** Hold is the job: it reports its run and holds the job for hold_ms. */
    @DisallowConcurrentExecution
    public static class Hold implements Job {
        @Override
        public void execute(JobExecutionContext ctx) {
            report("start", ctx);
            if (!ctx.isRecovering()) {
                try {
                    Thread.sleep(holdMillis);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            report("end", ctx);
        }

        private static void report(String event, JobExecutionContext ctx) {
            // A recovered fire's data names the fire it re-runs.
            String original = ctx.getMergedJobDataMap().getString(Scheduler.FAILED_JOB_ORIGINAL_TRIGGER_SCHEDULED_FIRETIME_IN_MILLISECONDS);
            System.out.println("{\"event\":\"" + event + "\",\"instance\":\"" + instance
                    + "\",\"at\":" + System.currentTimeMillis()
                    + ",\"fire\":\"" + ctx.getFireInstanceId()
                    + "\",\"trigger\":\"" + ctx.getTrigger().getKey()
                    + "\",\"scheduled\":" + ctx.getScheduledFireTime().getTime()
                    + ",\"recovering\":" + ctx.isRecovering()
                    + ",\"original_scheduled\":" + (original == null ? "0" : original) + "}");
        }
    }
}
